"""Learned cost models: features of candidate configs, the models (XGBoost, least squares) by kind, training from
tuning logs."""

from .base import CostModel, relative_throughput
from .dataset import Dataset, records_dataset, throughput, train_from_records
from .features import DEFAULT_CACHE, KINDS, LOOP_DIM, FeatureCache, extract, feature_dim, valid_rows
from .linear import LinearCostModel
from .registry import COST_MODELS, cost_model_class
from .xgb_model import XGBCostModel, rank_correlation

__all__ = [
    "COST_MODELS", "DEFAULT_CACHE", "KINDS", "LOOP_DIM", "CostModel", "Dataset", "FeatureCache", "LinearCostModel",
    "XGBCostModel", "cost_model_class", "extract", "feature_dim", "rank_correlation", "records_dataset",
    "relative_throughput", "throughput", "train_from_records", "valid_rows",
]
