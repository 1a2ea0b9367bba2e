"""Compile the best config of a task from a log into a kernel callable on numpy arrays."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .errors import AutotuneError
from .database import TuningDatabase
from .records import Record
from .shipped import Knowledge, shipped_enabled
from .space import Config
from .target import compile_kernel, use_target_threads
from .task import Task
from .templates import default_template, prim_func, resolve, space_of


@dataclass
class Kernel:
    """A compiled kernel: call it on numpy inputs, time it with `time`."""

    task: Task
    config: Config | None
    record: Record | None
    executable: Any
    template: Any = None  # the Template of `config` (it may take constant operands relaid)
    source: str = ""  # where `config` came from when not from `record` (the shipped knowledge, a heuristic)

    def __post_init__(self):
        use_target_threads(self.task.target)  # once, before the kernel's first run starts TVM's thread pool

    @property
    def device(self):
        import tvm

        return tvm.cuda(0) if self.task.target_kind == "cuda" else tvm.cpu(0)

    def _args(self, inputs: Sequence[np.ndarray]):
        import tvm

        shapes = self.task.opdef.input_shapes(self.task.shape)
        if len(inputs) != len(shapes) or any(tuple(a.shape) != s for a, s in zip(inputs, shapes)):
            raise AutotuneError(f"{self.task.op} expects inputs of shapes {shapes}, got "
                                f"{[tuple(a.shape) for a in inputs]}")
        dev = self.device
        arrays = [np.ascontiguousarray(a, dtype=self.task.element.numpy_storage) for a in inputs]
        if self.template is not None and self.config is not None:
            arrays = self.template.kernel_inputs(self.task, self.config, arrays)
        out = tvm.runtime.empty(self.task.opdef.output_shape(self.task.shape), self.task.element.output, dev)
        return [tvm.runtime.tensor(a, dev) for a in arrays] + [out]

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        args = self._args(inputs)
        self.executable(*args)
        return args[-1].numpy()

    def time(self, *inputs: np.ndarray, repeat: int = 5, min_repeat_ms: float = 200) -> list[float]:
        """Seconds per call, one value per repeat (CPU threads: the target's `num-cores`, see `use_target_threads`)."""
        timer = self.executable.mod.time_evaluator("main", self.device, number=1, repeat=repeat,
                                                   min_repeat_ms=min_repeat_ms)
        return list(timer(*self._args(inputs)).results)


def compile_config(task: Task, config_index: int | None, template_ref: str | None = None) -> Kernel:
    """Compile one config of the task's template (None: the unscheduled default)."""
    if config_index is None:
        mod, cfg, tmpl = prim_func(task), None, None
    else:
        tmpl = resolve(template_ref) if template_ref else default_template(task)
        cfg = space_of(tmpl, task).get(config_index)
        mod = tmpl.kernel(task, cfg)
    return Kernel(task, cfg, None, compile_kernel(mod, task.target), tmpl)


def build_best(log: str | os.PathLike | Sequence[str | os.PathLike] | TuningDatabase, task: Task,
               shipped: bool | None = None) -> Kernel:
    """The best config of `task` in the log(s) (`TuningDatabase.best`: made by the current version of its
    template), compiled; where they hold none, the shipped knowledge's (`autotune.shipped`: the same task's, else
    the nearest task's, measured against the heuristic config where this machine can run it; `shipped` False, or
    None with AUTOTUNE_NO_SHIPPED=1 set: none, an error), its `source` saying which."""
    db = log if isinstance(log, TuningDatabase) else TuningDatabase.open(log)
    best = db.best(task)
    if best is None and shipped_enabled(shipped) and (found := shipped_kernel_config(task)) is not None:
        config, source = found
        kernel = compile_config(task, config.index)
        kernel.source = source
        return kernel
    if best is None:
        stale = db.stale(task)
        stale = (f" ({stale} made by other versions of its template, or by a template not trusted here: tune it "
                 "again, or list your template's module in AUTOTUNE_TEMPLATES)") if stale else ""
        where = "the records" if isinstance(log, TuningDatabase) else log
        raise AutotuneError(f"no valid record for {task} (key {task.key}) in {where}{stale}")
    kernel = compile_config(task, best.input.config.index, best.input.template)
    kernel.record = best
    return kernel


def shipped_kernel_config(task: Task) -> tuple[Config, str] | None:
    """(config, where it came from) of the shipped knowledge for `task` (None: it has none): the same task's;
    the nearest task's where this machine cannot time it or it ran faster than the heuristic config, else that."""
    from .model.default_schedule import default_template_func
    from .model.shipped_check import Contest, measurable_here, verdicts

    tmpl = default_template(task)
    found = Knowledge.load(task.target).config_for(task, space_of(tmpl, task))
    if found is None or found.exact or not measurable_here(task.target):
        return (found.config, found.describe()) if found is not None else None
    heuristic = default_template_func(tmpl, task)[1]
    if heuristic.index == found.config.index:
        return found.config, found.describe()
    [verdict] = verdicts([Contest(task, found.config, heuristic)])
    if verdict.keeps_shipped:
        return found.config, f"{found.describe()}; {verdict.describe()}"
    return heuristic, f"heuristic (config #{found.config.index} of {found.describe()} {verdict.describe()})"
