"""Feature vectors of candidate configs: pooled loop-nest features of the scheduled TIR, or knob values.

A `loop` row is PerStoreFeature's per-store rows pooled (`pool_store_rows`) followed by the per-loop-level
features of the dominant block (`loop_levels`: extents, kinds, footprints and strides, innermost first,
then the reuse curve: bytes per iteration brought into caches of 4 KiB to 32 MiB, then the register tile).

`loop` features mean the same thing for every operator and workload (one model trains on the
records of many tasks); `knob` features are cheap but only comparable within one template.
A config whose template `apply` raises gets a row of NaN (`valid_rows` tells them apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from autotune.space import Config, ConfigSpace
from autotune.target import host_cores
from autotune.task import Task
from autotune.templates import Template, prim_func

from .loop_levels import LEVEL_DIM, level_features

KINDS = ("loop", "knob")
N_STORE_FEATURES = 164  # PerStoreFeature with its defaults (buffers_per_store=5, 10 curve samples)
POOLED_DIM = 3 * N_STORE_FEATURES + 1
LOOP_DIM = POOLED_DIM + LEVEL_DIM
_FLOAT_OPS = slice(0, 7)  # float_mad .. float_other_func
_OUTER_PROD = 161  # product of the loop extents around the store
EXTRACT_THREADS = min(2, host_cores())  # C++ extraction threads (at most 2: template apply holds the GIL)


class RowSource(Protocol):
    """What computes loop rows of many configs elsewhere (`feature_pool.FeaturePool`: in worker processes)."""

    def rows(self, task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]: ...


class FeatureCache:
    """Rows already computed, per (task, template, kind) and config index; bounded per key (oldest evicted)."""

    def __init__(self, max_rows_per_key: int = 65536):  # ~130 MB of loop rows per task at most
        self.max_rows_per_key = max_rows_per_key
        self._rows: dict[tuple[str, str, str, str], dict[int, np.ndarray]] = {}

    def table(self, task: Task, template: Template, kind: str) -> dict[int, np.ndarray]:
        return self._rows.setdefault((task.key, template.name, template.version, kind), {})

    def store(self, table: dict[int, np.ndarray], index: int, row: np.ndarray) -> None:
        if len(table) >= self.max_rows_per_key:
            del table[next(iter(table))]
        table[index] = row

    def clear(self) -> None:
        self._rows.clear()

    def __len__(self) -> int:
        return sum(len(t) for t in self._rows.values())


DEFAULT_CACHE = FeatureCache()


def pool_store_rows(rows: np.ndarray, task_flops: float = 1.0) -> np.ndarray:
    """[n_stores, 164] log2(1+x) rows -> one vector: dominant store, max, totals over stores, log2(1+n).

    Totals are per FLOP of the task (log2(1 + sum) - log2(flops)): bytes moved, cache lines touched,
    operations per useful FLOP mean the same on a large and a small workload, which is what lets a
    model trained on other tasks rank this one (it ranks held-out tasks clearly better than un-normalised totals;
    see docs/experiments.md).
    """
    if rows.shape[0] == 0:
        return np.zeros(POOLED_DIM, dtype=np.float32)
    linear = np.exp2(rows.astype(np.float64)) - 1.0
    flops = linear[:, _FLOAT_OPS].sum(axis=1)
    dominant = max(range(rows.shape[0]), key=lambda r: (flops[r], rows[r, _OUTER_PROD]))
    totals = np.log2(1.0 + linear.sum(axis=0)) - np.log2(max(task_flops, 1.0))
    vec = np.concatenate([rows[dominant], rows.max(axis=0), totals,
                          [np.log2(1.0 + rows.shape[0])]])
    return vec.astype(np.float32)


class _LoopFeaturizer:
    """PerStoreFeature plus a TuneContext per task (built without MetaSchedule's 15 s tensor_intrin import)."""

    def __init__(self, threads: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        self._ms = ms
        self._threads = threads
        self._extractor = ms.feature_extractor.PerStoreFeature()
        self._contexts: dict[str, object] = {}

    def context(self, task: Task):
        ctx = self._contexts.get(task.key)
        if ctx is None:
            import tvm
            from tvm.s_tir.meta_schedule import _ffi_api
            from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

            mod = tvm.IRModule({"main": prim_func(task)})
            # TuneContext.__init__ imports tvm.s_tir.tensor_intrin (15 s); features only need mod + target.
            ctx = self._ms.TuneContext.__new__(self._ms.TuneContext)
            ctx.__init_handle_by_constructor__(_ffi_api.TuneContext, mod, tvm.target.Target(task.target), None, None,
                                               "main", self._threads, -1, get_logging_func(get_logger(__name__)))
            self._contexts[task.key] = ctx
        return ctx

    def rows(self, task: Task, template: Template, configs: Sequence[Config]) -> list[np.ndarray]:
        """Pooled loop features of each config (NaN row when the template rejects it)."""
        cands, where, levels = [], [], []
        out = [np.full(LOOP_DIM, np.nan, dtype=np.float32) for _ in configs]
        for pos, cfg in enumerate(configs):
            try:
                sch = template.apply(task, cfg)
            except Exception:  # noqa: BLE001, S112 - any failure of a template means "illegal config"
                continue
            cands.append(self._ms.MeasureCandidate(sch, []))
            where.append(pos)
            try:
                levels.append(level_features(sch.mod["main"]))
            except Exception:  # noqa: BLE001 - IR this extractor does not know: the per-store part still counts
                levels.append(np.zeros(LEVEL_DIM, dtype=np.float32))
        if not cands:
            return out
        ctx = self.context(task)
        try:
            feats = self._extractor.extract_from(ctx, cands)
        except Exception:  # noqa: BLE001 - one bad schedule: extract one by one so the others still count
            feats = []
            for c in cands:
                try:
                    feats.append(self._extractor.extract_from(ctx, [c])[0])
                except Exception:  # noqa: BLE001
                    feats.append(None)
        for pos, f, lv in zip(where, feats, levels):
            if f is not None:
                out[pos] = np.concatenate([pool_store_rows(f.numpy(), task.flops), lv])
        return out


_FEATURIZER: dict[int, _LoopFeaturizer] = {}  # per thread count, created on first use: importing TVM is slow


def prepare_loop_features(threads: int = EXTRACT_THREADS) -> _LoopFeaturizer:
    """The extractor of this process for a thread count (built now: importing TVM takes seconds)."""
    if threads not in _FEATURIZER:
        _FEATURIZER[threads] = _LoopFeaturizer(threads)
    return _FEATURIZER[threads]


def loop_rows(task: Task, template: Template, configs: Sequence[Config],
              threads: int = EXTRACT_THREADS) -> list[np.ndarray]:
    """Loop features of configs, computed in this process."""
    return prepare_loop_features(threads).rows(task, template, configs)


def feature_dim(kind: str, space: ConfigSpace | None = None) -> int:
    """Length of a feature row (knob rows depend on the space)."""
    if kind == "loop":
        return LOOP_DIM
    if kind == "knob":
        if space is None:
            raise ValueError("knob feature length depends on the space")
        return len(space.knob_features(0))
    raise ValueError(f"unknown feature kind {kind!r}; choose one of {KINDS}")


def extract(task: Task, template: Template, space: ConfigSpace, indices: Sequence[int], kind: str = "loop",
            cache: FeatureCache | None = None, pool: RowSource | None = None) -> np.ndarray:
    """Feature matrix [len(indices), d] (float32); rows already in `cache` are not recomputed.

    `pool` (loop features only) computes large batches of missing rows in worker processes.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown feature kind {kind!r}; choose one of {KINDS}")
    cache = DEFAULT_CACHE if cache is None else cache
    table = cache.table(task, template, kind)
    missing = list(dict.fromkeys(int(i) for i in indices if int(i) not in table))
    if missing:
        if kind == "loop":
            configs = [space.get(i) for i in missing]
            new_rows = (pool.rows(task, template, configs) if pool is not None
                        else loop_rows(task, template, configs))
        else:
            new_rows = [np.asarray(space.knob_features(i), dtype=np.float32) for i in missing]
        for index, row in zip(missing, new_rows):
            cache.store(table, index, row)
    dim = feature_dim(kind, space)
    if not len(indices):
        return np.zeros((0, dim), dtype=np.float32)
    # A row evicted between store and read is recomputed (only when one call exceeds the bound).
    rows = [table[int(i)] if int(i) in table else extract(task, template, space, [i], kind, FeatureCache())[0]
            for i in indices]
    return np.stack(rows)


def valid_rows(X: np.ndarray) -> np.ndarray:
    """Boolean mask of rows whose config the template accepted."""
    return np.isfinite(X).all(axis=1)
