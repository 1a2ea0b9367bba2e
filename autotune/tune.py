"""Tune one task: a tuning session (`autotune.session`) over its log, with a builder and a runner of its own
unless given them."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .database import TuningDatabase
from .errors import AutotuneError
from .measure import Builder, Runner, RunnerOptions
from .operators import default_template_ref
from .records import Record
from .retime import RETIMES
from .session import STANDARD, Callback, Measurer, TuningSession
from .session import early_stopping as stop_early
from .session import progress as progress_callback
from .target import host_arch, is_cross, target_arch
from .task import Task
from .templates import resolve, space_of
from .transfer import start_options
from .tuners import make_tuner, options_type


@dataclass
class TuneResult:
    task: Task
    log: Path
    records: list[Record] = field(default_factory=list)  # this task's trials, resumed ones first
    resumed: int = 0
    stopped: str = ""  # why the loop ended early, if it did
    retimes: list[Record] = field(default_factory=list)  # later timings of the contenders (autotune.retime)

    @classmethod
    def of(cls, session: TuningSession, log: Path) -> TuneResult:
        return cls(session.task, log, list(session.trials), session.resumed, session.stopped, list(session.retimes))

    @property
    def best(self) -> Record | None:
        """The best config of this run's records (`TuningDatabase.best`)."""
        return TuningDatabase(self.records + self.retimes).best(self.task)

    def timings(self, record: Record) -> int:
        """How many valid timings of the config of `record` scored it."""
        return len(TuningDatabase(self.records + self.retimes).timings(record))

    @property
    def errors(self) -> int:
        return sum(not r.result.ok for r in self.records)


TEMPLATE_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")  # module.path:attribute


def check_template_ref(ref: str) -> None:
    """Raise unless `ref` has the form of a template reference, `package.module:attribute`."""
    if not isinstance(ref, str) or not TEMPLATE_REF.fullmatch(ref):
        raise AutotuneError(f"bad template reference {ref!r}: expected module:attribute, e.g. "
                            "search_spaces.matmul:MATMUL_CPU (or leave --template out for the operator's own)")


def check_search_arguments(trials: int = 1, batch_size: int = 1, early_stopping: int | None = None, seed: int = 0,
                           retime: int = 0, build_timeout: float = 1.0, template: str | None = None) -> None:
    """Raise an AutotuneError naming the valid range for a search argument no run can use: trials and
    batch_size >= 1, early_stopping None or >= 1, seed and retime >= 0, build_timeout > 0, a template reference
    of the form module:attribute."""
    def integer(value: object) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    for name, value, low in (("trials", trials, 1), ("batch_size", batch_size, 1), ("seed", seed, 0),
                             ("retime", retime, 0)):
        if not integer(value) or value < low:
            raise AutotuneError(f"{name} must be an integer >= {low}, not {value!r}")
    if early_stopping is not None and (not integer(early_stopping) or early_stopping < 1):
        raise AutotuneError(f"early_stopping must be an integer >= 1 (trials without improvement) or None (off), "
                            f"not {early_stopping!r}")
    if isinstance(build_timeout, bool) or not isinstance(build_timeout, numbers.Real) \
            or not math.isfinite(build_timeout) or build_timeout <= 0:
        raise AutotuneError(f"build_timeout must be a finite number of seconds > 0, not {build_timeout!r}")
    if template is not None:
        check_template_ref(template)


def default_log_path(task: Task) -> Path:
    return Path("logs") / f"{task.key}.jsonl"


def open_session(task: Task, db: TuningDatabase, measurer: Measurer, tuner: str = "random",
                 template: str | None = None, seed: int = 0, tuner_options: Any = None,
                 transfer: Sequence[Record] | Callable[[], Sequence[Record]] = (), cache: Any = None,
                 callbacks: Sequence[Callback] = STANDARD) -> TuningSession:
    """A tuning session of `task` resumed from `db` (which commits its records), its tuner `tuner` with its
    options and transfer records (or what gives them, asked when the tuner is made: when the search first needs
    it); where those hold shipped knowledge, its cost model too (`transfer.start_options`)."""
    template_ref = template or default_template_ref(task.op, task.target_kind)
    tmpl = resolve(template_ref)
    if tmpl.op != task.op or tmpl.target_kind != task.target_kind:
        raise AutotuneError(f"template {template_ref} is for {tmpl.op}/{tmpl.target_kind}, not {task.op}/"
                            f"{task.target_kind}")
    space = space_of(tmpl, task)

    def made():
        records = transfer() if callable(transfer) else transfer
        return make_tuner(tuner, task, space, template_ref, seed=seed, cache=cache, transfer=records,
                          options=start_options(task, records, tuner, tuner_options) if records else tuner_options)

    return TuningSession(task, template_ref, space, tmpl.version, db, measurer, made, list(callbacks))


def tune(task: Task, trials: int = 200, tuner: str = "random", log: str | Path | None = None, seed: int = 0,
         early_stopping: int | None = None, batch_size: int = 8, template: str | None = None,
         tuner_options: Any = None, transfer: Sequence[Record] = (), runner_options: RunnerOptions | None = None,
         builder: Builder | None = None, runner: Runner | None = None, build_timeout: float = 60.0,
         progress: Callable[[TuneResult], None] | None = None, retime: int = RETIMES) -> TuneResult:
    """Tune `task` until `trials` configs have been measured (counting those already in `log`), then time
    the contenders for the best `retime` more times each (see `autotune.retime`; 0: never).

    `tuner_options`: the tuner's options (`autotune.tuners.options_type(tuner)`, None: its defaults);
    `transfer`: records of other tasks a learning tuner starts from."""
    options_type(tuner)  # an unknown tuner fails before any work
    check_search_arguments(trials, batch_size, early_stopping, seed, retime, build_timeout, template)
    if runner is None:
        ensure_measurable(task)
        (runner_options or RunnerOptions()).check_local()
    log_path = Path(log) if log else default_log_path(task)
    callbacks: list[Callback] = list(STANDARD)
    if progress:
        callbacks.append(progress_callback(lambda s: progress(TuneResult.of(s, log_path))))
    if early_stopping:
        callbacks.append(stop_early(early_stopping))
    with TuningDatabase(log=log_path) as db, Measurer(builder, runner, runner_options, build_timeout) as measurer:
        session = open_session(task, db, measurer, tuner, template, seed, tuner_options, transfer,
                               callbacks=callbacks)
        session.search(trials, batch_size)
        session.retime(retime, seed)
    return TuneResult.of(session, log_path)


def ensure_measurable(task: Task) -> None:
    """Raise, with what to do instead, when this machine cannot measure the task's target."""
    if task.target_kind == "cuda" and not cuda_device_present():
        raise AutotuneError("no CUDA device is available on this machine for measurement: run on a machine with a "
                            "GPU, measure through an RPC server of a GPU machine (--rpc-key/--rpc-tracker), or pass "
                            "--build-only to build and validate candidates without measuring")
    if is_cross(task.target):
        raise AutotuneError(f"{target_arch(task.target)} kernels cannot run on this {host_arch()} machine: measure "
                            "them on the device through an RPC server there (autotune rpc server; --rpc-key/"
                            "--rpc-tracker here), or pass --build-only to build and validate candidates without "
                            "measuring")


def cuda_device_present() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # a TVM build without the CUDA runtime
        return False
