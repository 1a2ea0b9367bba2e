"""Whole-model path: capture a PyTorch model, extract its tunable tasks, tune them in one budget, build it.

    tasks = extract_tasks("models.py:resnet18")             # [(Task, weight), ...]
    tune_model("models.py:resnet18", trials=2000, log="logs/resnet18.jsonl")
    model = build_model("models.py:resnet18", logs=["logs/resnet18.jsonl"])
    out = model(x)                                          # numpy; model.report says what was tuned
    model.export_library("resnet18.so"); load_library("resnet18.so")(x)   # torch tensors in and out
"""

from .build import BuildReport, BuiltModel, build_model
from .capture import Captured, InputSpec, capture
from .extract import extract_tasks
from .library import ModelLibrary, load_library
from .scheduler import tune_model

__all__ = ["BuildReport", "BuiltModel", "Captured", "InputSpec", "build_model", "capture", "extract_tasks",
           "load_library", "ModelLibrary", "tune_model"]
