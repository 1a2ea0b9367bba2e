"""autotune: a tensor-program auto-tuner on TVM 0.27.

    task = make_task("matmul", "M=1024,N=1024,K=1024")
    result = tune(task, trials=200, tuner="xgb", log="logs/mm.jsonl")
    kernel = build_best("logs/mm.jsonl", task)   # callable on numpy arrays; kernel.time(...)
    best = TuningDatabase.open("logs/mm.jsonl").best(task)   # the record `build_best` compiles
"""

from .database import TuningDatabase
from .errors import AutotuneError
from .kernel import Kernel, build_best, compile_config
from .records import Record, load_records
from .task import Task, make_task
from .tune import TuneResult, tune
from .version import __version__

__all__ = ["AutotuneError", "Kernel", "Record", "Task", "TuneResult", "TuningDatabase", "build_best", "compile_config",
           "load_records", "make_task", "tune", "__version__"]
