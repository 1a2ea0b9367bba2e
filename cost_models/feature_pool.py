"""Loop features computed in worker processes: template `apply` is Python and holds the GIL, so threads do not help."""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Self

import numpy as np

from autotune.space import Config
from autotune.task import Task
from autotune.templates import Template

from .features import loop_rows, prepare_loop_features


def _warm_up() -> None:
    """Import TVM and build the extractor once per worker, before the first real batch."""
    prepare_loop_features(threads=1)


def _rows(task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]:
    return loop_rows(task, template, configs, threads=1)


class FeaturePool:
    """Spawned processes that split each batch of at least `min_batch` configs; smaller ones run in process.

    Any failure of the pool (a template that cannot be pickled, a dead worker) falls back to this
    process for good, with one warning: features never depend on where they were computed.
    """

    def __init__(self, workers: int = 2, min_batch: int = 8):
        self.workers, self.min_batch = workers, min_batch
        ctx = multiprocessing.get_context("spawn")  # fork can hang once TVM's thread pool has run
        self._executor: ProcessPoolExecutor | None = ProcessPoolExecutor(workers, mp_context=ctx,
                                                                         initializer=_warm_up)
        for _ in range(workers):  # start the workers now: they import TVM while the caller does other work
            self._executor.submit(int, 0)

    def rows(self, task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]:
        if self._executor is None or len(configs) < self.min_batch:
            return loop_rows(task, template, configs)
        chunks = [list(configs[k::self.workers]) for k in range(self.workers)]
        try:
            parts = list(self._executor.map(_rows, [task] * self.workers, [template] * self.workers, chunks))
        except Exception as err:  # noqa: BLE001 - pickling or worker failure: compute here from now on
            warnings.warn(f"feature worker processes failed ({type(err).__name__}: {err}); "
                          "computing features in this process", stacklevel=2)
            self.close()
            return loop_rows(task, template, configs)
        out: list[np.ndarray] = [np.empty(0)] * len(configs)
        for k, part in enumerate(parts):
            out[k::self.workers] = part
        return out

    @property
    def closed(self) -> bool:
        return self._executor is None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[int, FeaturePool] = {}  # one pool per worker count for the whole process


def shared_pool(workers: int) -> FeaturePool:
    """A process-wide pool of `workers` processes (started once: each imports TVM, which takes seconds).

    Spawned workers import the caller's main script: a script using one needs `if __name__ == "__main__":`.
    """
    pool = _SHARED.get(workers)
    if pool is None or pool.closed:
        pool = _SHARED[workers] = FeaturePool(workers)
    return pool
