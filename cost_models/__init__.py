"""Learned cost models: features of candidate configs, an XGBoost model, training from tuning logs."""

from .dataset import Dataset, records_dataset, throughput, train_from_records
from .features import DEFAULT_CACHE, KINDS, LOOP_DIM, FeatureCache, extract, feature_dim, valid_rows
from .xgb_model import XGBCostModel, rank_correlation, relative_throughput

__all__ = [
    "DEFAULT_CACHE", "KINDS", "LOOP_DIM", "Dataset", "FeatureCache", "XGBCostModel", "extract", "feature_dim",
    "rank_correlation", "records_dataset", "relative_throughput", "throughput", "train_from_records", "valid_rows",
]
