"""The model-guided tuner's cost model: fitted on the task's own measurements and other tasks' records
(transfer), on top of a saved model if one is given."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cost_models.base import CostModel
from cost_models.dataset import Dataset, records_dataset
from cost_models.features import FeatureCache, RowSource
from cost_models.registry import cost_model_class

from ..errors import AutotuneError
from ..records import Record
from ..task import Task
from .options import XGBOptions


def training_rows(X: np.ndarray, y: np.ndarray, transfer: Dataset | None, halflife: float):
    """The task's own rows (group 0) and the transfer rows (their groups + 1) with their weights: each own row
    weighs `max(1, n_transfer / halflife)`, each transfer row 1, so after `halflife` own records the task's
    own data weigh as much as all transferred data. Returns (X, y, groups, weights)."""
    n_transfer = len(transfer) if transfer is not None else 0
    parts = [(X, y, np.zeros(len(y), int), np.full(len(y), max(1.0, n_transfer / halflife)))]
    if transfer is not None:
        parts.append((transfer.X, transfer.y, transfer.groups + 1, np.ones(n_transfer)))
    return tuple(np.concatenate(p) for p in zip(*parts))


class ModelTrainer:
    """Fits the search's cost model (`options.model_kind`) as `options.transfer_fit` says.

    `transfer`: records of other tasks (records of `task` itself are left out); with knob features only those of
    `template_ref` count (rows of other templates do not line up). `width`: the length of this task's feature
    rows. add_transfer() adds more; the transfer rows are rebuilt, as the constructor builds them, at the next fit.
    """

    def __init__(self, task: Task, template_ref: str, options: XGBOptions, seed: int, width: int,
                 cache: FeatureCache, pool: RowSource | None = None, transfer: Iterable[Record] = ()):
        self.task, self.template_ref, self.options, self.seed, self.width = task, template_ref, options, seed, width
        self.cache, self.pool = cache, pool
        self.kind = cost_model_class(options.model_kind)
        self.base = self._load(options.cost_model)  # a saved model every fit continues from
        self.records: list[Record] = []  # transfer records, in the order given
        self.pretrained: CostModel | None = None  # "finetune": the model of the transfer records (and base)
        self._transfer: Dataset | None = None
        self._stale = False  # records were added since the transfer rows were built
        self.add_transfer(transfer)
        self.transfer()  # built now: records that cannot be used fail the tuner's construction, not a later fit

    def _load(self, path: str | None) -> CostModel | None:
        if path is None:
            return None
        model = self.kind.load(path)
        if model.features != self.options.features:
            raise AutotuneError(f"cost model {path} was trained on {model.features} features, "
                                f"not {self.options.features}")
        return model

    def add_transfer(self, records: Iterable[Record]) -> bool:
        """Add records of other tasks; True when any was new to the model (it must be fitted again)."""
        new = [r for r in records if r.task.key != self.task.key]
        if not new:
            return False
        self.records += new
        self._stale, self.pretrained = True, None
        return True

    def transfer(self) -> Dataset | None:
        """The transfer rows (None: no usable record)."""
        if self._stale:
            self._transfer, self._stale = self._dataset(), False
        return self._transfer

    def _dataset(self) -> Dataset | None:
        usable = [r for r in self.records if self.options.features == "loop" or r.input.template == self.template_ref]
        if not usable:
            return None
        data = records_dataset(usable, self.options.features, self.options.transfer_max_per_task, self.seed,
                               self.cache, self.pool)
        if len(data) and data.X.shape[1] != self.width:
            raise AutotuneError("transfer records have features of another length than this task's")
        return data if len(data) else None

    def fit(self, X: np.ndarray, y: np.ndarray) -> CostModel | None:
        """The model of the task's own rows `X` (finite) with throughputs `y` (none: nothing of its own to rank
        yet) and the transfer rows; None where neither they nor a saved model guide the search."""
        transfer = self.transfer()
        if not len(y) and transfer is None:
            return self.base
        opts = self.options
        if opts.transfer_fit == "finetune" and transfer is not None:
            if self.pretrained is None:
                self.pretrained = self._new(opts.n_rounds).fit(transfer.X, transfer.y, transfer.groups,
                                                               init_model=self.base)
            if not len(y):
                return self.pretrained
            return self._new(opts.finetune_rounds).fit(X, y, np.zeros(len(y), int), init_model=self.pretrained)
        Xs, ys, gs, ws = training_rows(X, y, transfer, opts.transfer_halflife)
        return self._new(opts.n_rounds).fit(Xs, ys, gs, ws, init_model=self.base)

    def _new(self, n_rounds: int) -> CostModel:
        return self.kind.for_tuning(self.options.features, self.options.objective, n_rounds, self.seed, like=self.base)
