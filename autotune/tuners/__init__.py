"""Tuners by name. Each answers next_batch(n) and update(inputs, results)."""

from __future__ import annotations

import importlib

from ..errors import AutotuneError

TUNERS = {
    "random": "autotune.tuners.simple:RandomTuner",
    "grid": "autotune.tuners.simple:GridTuner",
    "xgb": "autotune.tuners.xgb:XGBTuner",
}


def get_tuner_class(name: str):
    try:
        module, _, attr = TUNERS[name].partition(":")
    except KeyError:
        raise AutotuneError(f"unknown tuner {name!r}; choose one of: {', '.join(TUNERS)}") from None
    return getattr(importlib.import_module(module), attr)
