"""Cost models by kind: the one place a tuner gets its model class from."""

from __future__ import annotations

from autotune.errors import AutotuneError

from .base import CostModel
from .linear import LinearCostModel
from .xgb_model import XGBCostModel

COST_MODELS: dict[str, type[CostModel]] = {"xgb": XGBCostModel, "linear": LinearCostModel}
DEFAULT_COST_MODEL = "xgb"


def cost_model_class(kind: str) -> type[CostModel]:
    """The model class of `kind` (a key of COST_MODELS)."""
    try:
        return COST_MODELS[kind]
    except KeyError:
        raise AutotuneError(f"unknown cost model kind {kind!r}; choose one of: {', '.join(COST_MODELS)}") from None
