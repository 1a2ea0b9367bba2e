"""An XGBoost cost model with the scikit-learn contract: scores configs, higher means faster."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from autotune.errors import AutotuneError

from .base import OBJECTIVES, masked_predict, read_model_file, relative_throughput, write_model_file

XGB_OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}  # one for each of OBJECTIVES
FILE_FORMAT = "autotune-xgb-cost-model"
FILE_VERSION = 6  # 2: loop-feature totals are per FLOP of the task; 3: + per-loop-level features; 4: + reuse curve;
#                  5: + register tile; 6: a list of boosters (`bag`)
READS_VERSIONS = (5, 6)  # same features: a version-5 file is a bag of one
SMALL_FIT_ROWS = 4096


def model_file_error(path: str | os.PathLike, err: Exception) -> AutotuneError:
    """One line for a model file that could not be loaded (`err`: what its reader raised), saying what to do."""
    path = os.fspath(path)
    if isinstance(err, json.JSONDecodeError):
        reason = f"it is not JSON ({err.msg} at line {err.lineno}): it may be empty or cut short"
    elif isinstance(err, OSError):
        reason = f"it cannot be read ({err.strerror or err})"
    else:
        text = str(err).strip()
        reason = (text.splitlines()[0] if text else type(err).__name__)
        if type(err) is ValueError and path in reason:  # read_model_file's own message
            return AutotuneError(reason if "train-model" in reason else f"{reason}: give a file `autotune "
                                 "train-model` wrote")
        reason = f"it is damaged ({type(err).__name__}: {reason})"
    return AutotuneError(f"cannot load cost model {path}: {reason}; give a file `autotune train-model` wrote")


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two score vectors (ties broken by position): how well `a` orders as `b`."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


class XGBCostModel:
    """XGBoost on feature rows. `fit(X, y, groups)`: y is a throughput (1/cost, 0 for errors), groups a task id.

    objective "rank" learns the order of configs within each group (pairwise); "reg" regresses the
    relative throughput. `features` names the feature kind the rows were made with (kept with the model).
    The defaults (200 shallow trees, a small step) rank held-out tasks better than deeper, faster-learning trees
    and the task's own configs as well, for about the same fitting time (docs/experiments.md).

    `bag` > 1 makes it a bag of boosters (seeds seed, seed + 1, ...) scoring by their mean; give each its own
    rows and columns (`subsample`, `colsample_bytree` < 1). Offline it ranks held-out tasks more steadily than one
    booster, but tuning with transfer did not gain from it, so the default is one booster on all rows. Small
    fits train two boosters at a time.
    """

    def __init__(self, objective: str = "rank", features: str = "loop", n_rounds: int = 200, max_depth: int = 4,
                 eta: float = 0.05, min_child_weight: float = 1.0, subsample: float = 1.0,
                 colsample_bytree: float = 1.0, pairs_per_sample: int = 8, seed: int = 0, nthread: int = 2,
                 bag: int = 1):
        if bag < 1:
            raise ValueError(f"bag must be at least 1, got {bag}")
        self.objective = objective
        self.features = features
        self.n_rounds = n_rounds
        self.max_depth = max_depth
        self.eta = eta
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.pairs_per_sample = pairs_per_sample
        self.seed = seed
        self.nthread = nthread
        self.bag = bag

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("objective", "features", "n_rounds", "max_depth", "eta",
                                              "min_child_weight", "subsample", "colsample_bytree",
                                              "pairs_per_sample", "seed", "nthread", "bag")}

    def _xgb_params(self) -> dict[str, Any]:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")
        params = {"objective": XGB_OBJECTIVES[self.objective], "max_depth": self.max_depth, "eta": self.eta,
                  "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                  "colsample_bytree": self.colsample_bytree, "tree_method": "hist", "seed": self.seed,
                  "nthread": min(self.nthread, 2), "verbosity": 0}
        if self.objective == "rank":
            params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=self.pairs_per_sample)
        return params

    @classmethod
    def for_tuning(cls, features: str, objective: str, n_rounds: int, seed: int,
                   like: XGBCostModel | None = None) -> XGBCostModel:
        """An unfitted model of `n_rounds` trees; a loaded bag of boosters (`like`) stays one (each booster
        continues on the search's data)."""
        shape = {k: getattr(like, k) for k in ("bag", "subsample", "colsample_bytree")} if like is not None else {}
        return cls(objective=objective, features=features, n_rounds=n_rounds, seed=seed, **shape)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, weights: np.ndarray | None = None,
            init_model: XGBCostModel | None = None) -> XGBCostModel:
        """Train on rows with finite features; `weights` is per row (for "rank", a group takes its first row's).

        `init_model`, a fitted model, is continued from (its trees are kept, new ones are added): booster m of
        the bag continues booster m (modulo its bag's size).
        """
        import xgboost as xgb

        X = np.asarray(X, dtype=np.float32)
        groups = np.asarray(groups)
        y = relative_throughput(y, groups)
        weight = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
        keep = np.isfinite(X).all(axis=1)
        X, y, groups, weight = X[keep], y[keep], groups[keep], weight[keep]
        if len(y) == 0:
            raise ValueError("no rows with finite features to fit on")
        order = np.argsort(groups, kind="stable")  # ranking needs each group's rows together
        X, y, groups, weight = X[order], y[order], groups[order], weight[order]
        _, qid = np.unique(groups, return_inverse=True)
        # Small fits gain little from a second thread and stall badly when the cores are busy.
        threads = 1 if len(y) < SMALL_FIT_ROWS else min(self.nthread, 2)
        if self.objective == "rank":
            first = np.r_[True, qid[1:] != qid[:-1]]
            dtrain = xgb.DMatrix(X, label=y, qid=qid, weight=weight[first], nthread=threads)
        else:
            dtrain = xgb.DMatrix(X, label=y, weight=weight, nthread=threads)
        bases = init_model.boosters_ if init_model is not None else [None]
        params = {**self._xgb_params(), "nthread": threads}

        def train(m: int):
            booster = xgb.train({**params, "seed": self.seed + m}, dtrain, num_boost_round=self.n_rounds,
                                xgb_model=bases[m % len(bases)])
            booster.set_param({"nthread": 1})  # predictions are small batches during search
            return booster

        if threads == 1 and self.bag > 1 and self.nthread > 1:  # xgboost lets go of the GIL while it trains
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=2) as pool:
                self.boosters_ = list(pool.map(train, range(self.bag)))
        else:
            self.boosters_ = [train(m) for m in range(self.bag)]
        self.n_features_in_ = X.shape[1]
        self.n_samples_ = len(y) + (init_model.n_samples_ if init_model is not None else 0)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores (higher is faster); -inf for rows with non-finite features (configs the template rejects)."""
        # no DMatrix: cheap for the small batches of a search
        return masked_predict(X, self.n_features_in_, np.float32,
                              lambda rows: np.mean([b.inplace_predict(rows) for b in self.boosters_], axis=0))

    @property
    def fitted(self) -> bool:
        return hasattr(self, "boosters_")

    def save(self, path: str | os.PathLike) -> None:
        """One JSON file: parameters, learned sizes and the boosters (XGBoost's own JSON, as strings)."""
        if not self.fitted:
            raise ValueError("cannot save a model that was never fitted")
        write_model_file(path, FILE_FORMAT, FILE_VERSION, {
            "params": self.get_params(), "n_features_in_": self.n_features_in_, "n_samples_": self.n_samples_,
            "boosters": [bytes(b.save_raw("json")).decode() for b in self.boosters_]})

    @classmethod
    def load(cls, path: str | os.PathLike) -> XGBCostModel:
        """The model `save` wrote to `path`; an AutotuneError (saying what to do) for any other file."""
        try:
            return cls._load(path)
        except AutotuneError:
            raise
        except Exception as err:  # a missing, unreadable or damaged file: whatever its parser raises
            raise model_file_error(path, err) from None

    @classmethod
    def _load(cls, path: str | os.PathLike) -> XGBCostModel:
        import xgboost as xgb

        doc = read_model_file(path, FILE_FORMAT, READS_VERSIONS, "an autotune cost model")
        model = cls(**doc["params"])
        model.boosters_ = []
        for text in doc["boosters"] if "boosters" in doc else [doc["booster"]]:
            booster = xgb.Booster()
            booster.load_model(bytearray(text.encode()))
            booster.set_param({"nthread": 1})
            model.boosters_.append(booster)
        model.n_features_in_ = int(doc["n_features_in_"])
        model.n_samples_ = int(doc["n_samples_"])
        return model
