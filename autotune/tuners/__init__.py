"""Tuners by name, and the one way to make one (`make_tuner`).

Each answers next_batch(n), update(inputs, results) and add_transfer(records) (`base.Tuner`); a tuner class
names its options type (`options_type`, None: it has none) and whether it learns from other tasks' records
(`learns_from_transfer`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import AutotuneError

if TYPE_CHECKING:
    from cost_models.features import FeatureCache

    from ..records import Record
    from ..space import ConfigSpace
    from ..task import Task
    from .base import Tuner

TUNERS = {  # imported when first asked for: the model-guided tuner's imports take a while
    "random": "autotune.tuners.simple:RandomTuner",
    "grid": "autotune.tuners.simple:GridTuner",
    "xgb": "autotune.tuners.xgb:XGBTuner",
}


def get_tuner_class(name: str) -> type[Tuner]:
    """The tuner class of `name` (a key of TUNERS)."""
    try:
        module, _, attr = TUNERS[name].partition(":")
    except KeyError:
        raise AutotuneError(f"unknown tuner {name!r}; choose one of: {', '.join(TUNERS)}") from None
    return getattr(importlib.import_module(module), attr)


def options_type(name: str) -> type | None:
    """The options type of tuner `name` (None: it takes none)."""
    return get_tuner_class(name).options_type


def learns_from_transfer(name: str) -> bool:
    """Whether tuner `name` learns from records of other tasks (callers skip reading them where not)."""
    return get_tuner_class(name).learns_from_transfer


def make_tuner(name: str, task: Task, space: ConfigSpace, template_ref: str, *, seed: int = 0, options: Any = None,
               transfer: Iterable[Record] = (), cache: FeatureCache | None = None) -> Tuner:
    """Tuner `name` for `task` over `space` (of template `template_ref`). `options`: an object of its
    `options_type` (None: the defaults); `transfer`: records of other tasks; `cache`: feature rows shared between
    tuners (both ignored by a tuner that does not learn from other tasks)."""
    cls = get_tuner_class(name)
    if options is not None and (cls.options_type is None or not isinstance(options, cls.options_type)):
        wanted = f"{cls.options_type.__name__} options" if cls.options_type is not None else "no options"
        raise AutotuneError(f"the {name} tuner takes {wanted}, not {type(options).__name__}")
    return cls(task, space, template_ref, seed=seed, options=options, transfer=transfer, cache=cache)
