"""A progress bar for the tuning loop: trials, errors, best GFLOPS so far."""

from __future__ import annotations

import sys

from .task import Task


class ProgressBar:
    def __init__(self, total: int, task: Task, enabled: bool = True):
        self.total, self.task, self.enabled = total, task, enabled
        self._bar = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="trial", file=sys.stderr, dynamic_ncols=True)
        return self

    def update(self, result) -> None:
        if self._bar is None:
            return
        self._bar.n = len(result.records)
        best = result.best
        self._bar.set_postfix_str(f"best {best.gflops() if best else 0:.1f} GFLOPS, errors {result.errors}",
                                  refresh=False)  # one refresh per update, below
        self._bar.refresh()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
