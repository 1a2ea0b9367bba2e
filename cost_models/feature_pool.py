"""Loop features computed in worker processes: template `apply` is Python and holds the GIL, so threads do not help.

The workers are `autotune.measure.pool`'s isolated processes (`python -m ...`, not multiprocessing's spawn), so the
calling script needs no `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from typing import Self

import numpy as np

from autotune.measure.pool import IMPORT_TIMEOUT, WorkerPool
from autotune.space import Config
from autotune.task import Task
from autotune.templates import Template

from .features import loop_rows, prepare_loop_features

WORKER_IMPORTS = ("tvm",)  # a worker imports these with this module (start-up, not a batch's time)
BATCH_TIMEOUT = 300.0  # seconds for a worker's share of a batch (a few seconds as a rule): then killed, and in process


def _warm_up() -> None:
    """Build the extractor once per worker, before the first real batch."""
    prepare_loop_features(threads=1)


def _rows(task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]:
    return loop_rows(task, template, configs, threads=1)


class FeaturePool:
    """Worker processes that split each batch of at least `min_batch` configs; smaller ones run in process.

    The first such batch starts the workers (each imports TVM: seconds) and runs in process, as every batch does
    until they are up: a short run does not wait for them, a run that plans no batch never starts them.
    Any failure of the pool (a template that cannot be pickled, a dead worker) falls back to this
    process for good, with one warning: features never depend on where they were computed.
    """

    def __init__(self, workers: int = 2, min_batch: int = 8):
        self.workers, self.min_batch = workers, min_batch
        self._pool: WorkerPool | None = WorkerPool(workers)
        self._starting: threading.Thread | None = None

    def ready(self, wait: bool = False) -> bool:
        """Whether the workers are up; the first call starts them (the pool's own threads do: a worker dies with
        the thread that started it, PR_SET_PDEATHSIG), `wait` waits for them."""
        if self._pool is None:
            return False
        if self._starting is None:
            self._starting = threading.Thread(target=self._pool.map, daemon=True,
                                              args=(_warm_up, [()] * self.workers, IMPORT_TIMEOUT))
            self._starting.start()
        if wait:
            self._starting.join()
        return not self._starting.is_alive()

    def rows(self, task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]:
        if len(configs) < self.min_batch or not self.ready():
            return loop_rows(task, template, configs)
        chunks = [list(configs[k::self.workers]) for k in range(self.workers)]
        try:
            results = self._pool.map(_rows, [(task, template, chunk) for chunk in chunks], BATCH_TIMEOUT)
            failed = next((f"{r.status}: {r.message.strip().splitlines()[-1] if r.message.strip() else ''}"
                           for r in results if r.status != "ok"), None)
        except Exception as err:  # noqa: BLE001 - e.g. a template that cannot be pickled
            failed = f"{type(err).__name__}: {err}"
        if failed is not None:  # compute here from now on
            warnings.warn(f"feature worker processes failed ({failed}); computing features in this process",
                          stacklevel=2)
            self.close()
            return loop_rows(task, template, configs)
        out: list[np.ndarray] = [np.empty(0)] * len(configs)
        for k, result in enumerate(results):
            out[k::self.workers] = result.value
        return out

    @property
    def closed(self) -> bool:
        return self._pool is None

    def close(self) -> None:
        if self._pool is not None:
            if self._starting is not None:
                self._starting.join()
            self._pool.close()
            self._pool = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[int, FeaturePool] = {}  # one pool per worker count for the whole process


def shared_pool(workers: int) -> FeaturePool:
    """A process-wide pool of `workers` processes (started once: each imports TVM, which takes seconds)."""
    pool = _SHARED.get(workers)
    if pool is None or pool.closed:
        pool = _SHARED[workers] = FeaturePool(workers)
    return pool
