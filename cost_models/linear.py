"""A least-squares cost model: ridge regression of the relative throughput on the feature rows.

Cheap and deterministic, it ranks configs only roughly; tests use it to run a model-guided search without
XGBoost, and it is a baseline for the XGBoost model.
"""

from __future__ import annotations

import os
from typing import Any, Self

import numpy as np

from .base import masked_predict, read_model_file, relative_throughput, write_model_file

FILE_FORMAT = "autotune-linear-cost-model"
FILE_VERSION = 1


class LinearCostModel:
    """Scores a row as `X @ coef_ + intercept_`, fitted by weighted ridge least squares (`ridge` on standardised
    columns) to each row's throughput relative to its group's best.

    A fit with `init_model` fits the residual of that model's scores and adds its coefficients to them.
    """

    def __init__(self, features: str = "loop", ridge: float = 1.0):
        if ridge < 0:
            raise ValueError(f"ridge must be at least 0, got {ridge}")
        self.features = features
        self.ridge = ridge

    def get_params(self) -> dict[str, Any]:
        return {"features": self.features, "ridge": self.ridge}

    @classmethod
    def for_tuning(cls, features: str, objective: str, n_rounds: int, seed: int,
                   like: LinearCostModel | None = None) -> LinearCostModel:
        """A model of `features` (a least-squares fit has no objective, rounds or randomness to set)."""
        return cls(features=features, ridge=like.ridge if like is not None else 1.0)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, weights: np.ndarray | None = None,
            init_model: LinearCostModel | None = None) -> Self:
        """Fit on the rows with finite features (`weights` per row)."""
        X = np.asarray(X, dtype=np.float64)
        groups = np.asarray(groups)
        target = relative_throughput(y, groups)
        w = np.ones(len(target)) if weights is None else np.asarray(weights, dtype=np.float64)
        keep = np.isfinite(X).all(axis=1) if X.ndim == 2 else np.zeros(0, bool)
        X, target, w = X[keep], target[keep], w[keep]
        if len(target) == 0:
            raise ValueError("no rows with finite features to fit on")
        if init_model is not None:
            target = target - (X @ init_model.coef_ + init_model.intercept_)
        mean = np.average(X, axis=0, weights=w)
        scale = np.sqrt(np.average((X - mean) ** 2, axis=0, weights=w))
        scale[scale == 0] = 1.0
        Z = (X - mean) / scale
        centre = np.average(target, weights=w)
        lhs = Z.T @ (w[:, None] * Z) + self.ridge * np.eye(Z.shape[1])
        beta = np.linalg.lstsq(lhs, Z.T @ (w * (target - centre)), rcond=None)[0]
        self.coef_ = beta / scale
        self.intercept_ = float(centre - mean @ self.coef_)
        if init_model is not None:
            self.coef_ = self.coef_ + init_model.coef_
            self.intercept_ += init_model.intercept_
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores (higher is faster); -inf for rows with non-finite features."""
        return masked_predict(X, self.n_features_in_, np.float64, lambda rows: rows @ self.coef_ + self.intercept_)

    def save(self, path: str | os.PathLike) -> None:
        """One JSON file: parameters and coefficients."""
        if not hasattr(self, "coef_"):
            raise ValueError("cannot save a model that was never fitted")
        write_model_file(path, FILE_FORMAT, FILE_VERSION, {"params": self.get_params(), "coef": self.coef_.tolist(),
                                                           "intercept": self.intercept_})

    @classmethod
    def load(cls, path: str | os.PathLike) -> LinearCostModel:
        doc = read_model_file(path, FILE_FORMAT, (FILE_VERSION,), "a linear cost model")
        model = cls(**doc["params"])
        model.coef_ = np.asarray(doc["coef"], dtype=np.float64)
        model.intercept_ = float(doc["intercept"])
        model.n_features_in_ = len(model.coef_)
        return model
