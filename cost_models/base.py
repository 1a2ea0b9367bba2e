"""The cost-model seam: what a tuner asks of a model that scores configs from their feature rows."""

from __future__ import annotations

import io
import json
import os
from typing import Protocol, Self

import numpy as np

OBJECTIVES = ("rank", "reg")  # learn the order of configs within each task, or regress their relative throughput


class CostModel(Protocol):
    """Scores feature rows, higher meaning faster; the scikit-learn contract (learned state ends in `_`).

    `features` names the feature kind the rows are made of (`cost_models.features.KINDS`), kept with a saved
    model so that it is never fed rows of another kind.
    """

    features: str

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, weights: np.ndarray | None = None,
            init_model: Self | None = None) -> Self:
        """Learn from rows `X` with throughputs `y` (1/seconds, 0 for errors) of tasks `groups` (one id per task);
        `weights` per row; `init_model`, a fitted model of this kind, is continued from."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of rows (higher is faster); -inf for a row with non-finite features."""

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model to one file that `load` reads."""

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        """A model `save` wrote."""

    @classmethod
    def for_tuning(cls, features: str, objective: str, n_rounds: int, seed: int, like: Self | None = None) -> Self:
        """An unfitted model for a search: `n_rounds` the fitting effort where the kind has one; `like`, a loaded
        model the search continues, lends its shape where the kind has one."""


def relative_throughput(y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Throughput divided by its group's best (min_cost / cost), so tasks of any speed train together; 0 stays 0."""
    y = np.asarray(y, dtype=np.float64)
    out = np.zeros_like(y)
    for g in np.unique(groups):
        mask = groups == g
        best = y[mask].max()
        if best > 0:
            out[mask] = y[mask] / best
    return out


def masked_predict(X: np.ndarray, n_features: int, dtype: type, score) -> np.ndarray:
    """`score(rows)` for the rows of X with finite features, -inf for the others (configs the template rejects);
    X must have `n_features` columns."""
    X = np.asarray(X, dtype=dtype)
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"expected rows of {n_features} features, got shape {X.shape}")
    out = np.full(len(X), -np.inf)
    keep = np.isfinite(X).all(axis=1)
    if keep.any():
        out[keep] = score(X[keep])
    return out


def write_model_file(path: str | os.PathLike, file_format: str, version: int, body: dict) -> None:
    """Save a model as one JSON document, written whole or not at all (`autotune.files.replace_file`: an
    interrupted save leaves the previous file as it was; a symlink is followed; a directory or device is refused)."""
    from autotune.files import replace_file

    def write(fh) -> None:
        text = io.TextIOWrapper(fh, encoding="utf-8")
        json.dump({"format": file_format, "version": version, **body}, text)
        text.flush()
        text.detach()

    replace_file(path, write, what="model file")


def read_model_file(path: str | os.PathLike, file_format: str, versions: tuple[int, ...], what: str) -> dict:
    """The JSON document of a saved model of `file_format` at one of `versions`; ValueError (saying what to do)
    for any other file."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("format") != file_format:
        raise ValueError(f"{path} is not {what} file")
    if doc.get("version") not in versions:
        readable = " and ".join(map(str, versions))
        raise ValueError(f"{path} was saved by another version of autotune (file version {doc.get('version')}, "
                         f"this one reads {readable}): retrain it with autotune train-model")
    return doc
