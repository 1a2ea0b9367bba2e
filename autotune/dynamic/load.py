"""Build a dynamic kernel from a log: every task of the operator at some size is a uKernel candidate."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import AutotuneError
from ..kernel import compile_config
from ..database import TuningDatabase
from ..records import Record
from .dispatch import DynamicKernel, UKernel
from .spec import DynamicSpec, parse_dynamic


def ukernel_records(spec: DynamicSpec, records: TuningDatabase | Iterable[Record]) -> dict[int, Record]:
    """Height -> the record of the best config (`TuningDatabase.best`) of each task of `spec`'s operator."""
    db = TuningDatabase.of(records)
    out: dict[int, Record] = {}
    for key in db.task_keys():
        best = db.best(key)
        if best is not None and spec.matches(best.task):
            out[best.task.shape[spec.dim]] = best
    return out


def compile_ukernels(spec: DynamicSpec, best: dict[int, Record], heights: Sequence[int] | None = None) -> list[UKernel]:
    """Compile the best config of each height (all heights in `best` unless `heights` names some)."""
    out = []
    for h in sorted(heights if heights is not None else best, reverse=True):
        if h not in best:
            raise AutotuneError(f"no valid record for the uKernel {spec.dim}={h} of {spec}")
        rec = best[h]
        kernel = compile_config(rec.task, rec.input.config.index, rec.input.template)
        relayouts = kernel.template.relayouts(rec.task, kernel.config) if kernel.template else ()
        out.append(UKernel(h, rec.task, kernel.executable["main"], rec.result.mean_s, rec, relayouts=relayouts))
    return out


def load(log: str | os.PathLike | Sequence[str | os.PathLike], op: str | DynamicSpec, shape: str | None = None,
         target: str | dict[str, Any] = "llvm", heights: Sequence[int] | None = None,
         dtype: str = "float32") -> DynamicKernel:
    """The dynamic kernel of `op` (e.g. "matmul", "M=1..4096,N=768,K=768") in `dtype` from the uKernels in the
    log(s).

    Every task of the operator with the same fixed parameters and target is used as a uKernel
    (its best valid config), unless `heights` names the ones to use.
    """
    spec = op if isinstance(op, DynamicSpec) else parse_dynamic(op, shape or "", dtype, target=target)
    db = TuningDatabase.open(log)
    best = ukernel_records(spec, db)
    if not best:
        stale = any(spec.matches(r.task) and r.result.ok for r in db)
        raise AutotuneError(f"no valid uKernel record of {spec} in {log}"
                            + (" made by the current template version (re-tune)" if stale else ""))
    return DynamicKernel(spec, compile_ukernels(spec, best, heights))
