"""The model-guided tuner's options: one frozen value, checked when made."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cost_models.base import OBJECTIVES, CostModel
from cost_models.features import KINDS
from cost_models.registry import COST_MODELS, DEFAULT_COST_MODEL, cost_model_class
from cost_models.xgb_model import model_file_error

from ..errors import AutotuneError
from ..target import host_cores

DEFAULT_FEATURE_WORKERS = 2 if host_cores() >= 2 else 0

COLD_STARTS = ("roofline", "random")
TRANSFER_FITS = ("pool", "finetune")


@dataclass(frozen=True)
class XGBOptions:
    """How `XGBTuner` searches (the side-by-side runs behind the defaults are in docs/experiments.md).

    features: "loop" (TIR loop-nest features; transfer works across operators) or "knob" (config values).
    objective: "rank" (the order of configs within a task) or "reg" (their relative throughput).
    model_kind: the cost model (`cost_models.registry.COST_MODELS`: "xgb", or "linear" least squares);
    cost_model: path of a saved model of that kind whose fit the search continues.
    batch_size: configs planned per model refresh; next_batch serves from that plan until update().
    explore: share of each batch drawn at random; transfer_explore: that share while only transfer records (or
    the loaded model) guide the search, before two of the task's own measurements differ: a hedge against records
    that mis-rank a new operator, and an unbiased first sample for the task's own model.
    sa_chains x sa_steps bounds the configs scored per plan (loop features cost ~5-10 ms each to compute); a plan
    of fewer than `sa_full_plan` configs anneals for proportionally fewer steps (at least 2), so that a round of a
    few trials searches for less time (default 8; 1: every plan anneals for all steps. On a dynamic model's
    tune-model run of 12 uKernel tasks, 8 took 38% less time at 24 trials and 14% at 56, its builds 1.01x and
    0.95x those of 1, within the runs' noise: docs/experiments.md);
    sa_temperature: the annealing's starting temperature, in spreads of the start scores.
    knob_weight: bonus for each knob value new to a batch (diversity; 0 picks the top predictions);
    min_distance: knob changes between two configs of one batch.
    basin_weight: a candidate's score percentile is lowered by `basin_weight * sqrt(s)`, s the trials spent on
    its register tile since that tile's best measurement (`batch.stale_trials`): the model cannot rank the configs
    near the top, so a register tile that stopped improving gives way to untried ones (0: off; on by default
    because more runs, cold and with transfer, reached a good config with it).
    transfer_fit: how transfer records and the task's own train the model: "pool" fits one model on both, own
    rows weighing `n_transfer / transfer_halflife` each (so at `transfer_halflife` own records both weigh the
    same); "finetune" fits a model on the transfer records once and then, at each refit, adds `finetune_rounds`
    trees fitted on the task's own records alone to it. transfer_max_per_task: records kept per other task
    (the best quarter, then a random sample). n_rounds: trees per fit.
    transfer_elites: configs of the first batch taken from the transfer records by example (`elites`): the fastest
    configs of the other tasks whose template has this space's knobs, mapped onto this space, before the model's
    picks (0: off; on by default because it reached a good config in far fewer trials than a cold start).
    cold_start: how the first batch is picked while nothing guides the search (no model, no transfer):
    "random" (the default) or "roofline" (CPU targets, loop features): the best of a random sample by
    `cost_models.prior`'s roofline estimate, with the batch's diversity rule (it starts faster, most on
    convolutions, but GEMM runs can end lower); cold_random: the share of a roofline first batch drawn at random.
    incumbent_moves: slots of each model-guided batch for the best config measured so far with one split knob's
    innermost factor changed (`ConfigSpace.inner_moves`, the model's best-rated unmeasured ones): a register
    tile the model rates low because its few measurements had bad outer tilings is tried in the incumbent's
    schedule (0: off; on by default because cold runs ended with faster configs on matmul and conv2d).
    untuned_first: the first batch holds the template's heuristic config (`templates.heuristic_configs`, the one a
    build without records uses), so that a search starts from the untuned kernel's speed: with the few trials each of
    a dynamic model's uKernels gets, searches without it ended 20-40% below that (docs/experiments.md).
    feature_workers: processes computing the loop features of a plan's candidates (a template's apply is Python, one
    config at a time per process), shared by all tuners of this process; 0: in process. Default: 2 where the
    machine has 2 cores or more (a dynamic model's tune-model run took 14% less time than in process).
    """

    features: str = "loop"
    objective: str = "rank"
    model_kind: str = DEFAULT_COST_MODEL
    cost_model: str | None = None
    batch_size: int | None = None
    explore: float = 0.15
    transfer_explore: float = 0.5
    sa_chains: int = 16
    sa_steps: int = 16
    sa_full_plan: int = 8
    sa_temperature: float = 1.0
    knob_weight: float = 0.1
    min_distance: int = 1
    basin_weight: float = 0.05
    transfer_fit: str = "pool"
    transfer_halflife: int = 16
    transfer_max_per_task: int = 512
    n_rounds: int = 200
    finetune_rounds: int = 200
    transfer_elites: int = 4
    cold_start: str = "random"
    cold_random: float = 0.0
    incumbent_moves: int = 2
    untuned_first: bool = True
    feature_workers: int = DEFAULT_FEATURE_WORKERS

    def __post_init__(self) -> None:
        for name, value, choices in (("feature kind", self.features, KINDS), ("objective", self.objective, OBJECTIVES),
                                     ("cost model kind", self.model_kind, tuple(COST_MODELS)),
                                     ("cold start", self.cold_start, COLD_STARTS),
                                     ("transfer fit", self.transfer_fit, TRANSFER_FITS)):
            if value not in choices:
                raise AutotuneError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
        for name in ("explore", "transfer_explore", "cold_random"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise AutotuneError(f"{name} is a share of the batch (0 to 1), not {getattr(self, name)}")
        least = {"sa_chains": 1, "sa_steps": 0, "sa_full_plan": 1, "min_distance": 0, "transfer_max_per_task": 1,
                 "n_rounds": 1, "finetune_rounds": 1, "transfer_elites": 0, "incumbent_moves": 0, "feature_workers": 0,
                 "knob_weight": 0, "basin_weight": 0}
        for name, low in least.items():
            if getattr(self, name) < low:
                raise AutotuneError(f"xgb option {name} must be at least {low}, not {getattr(self, name)}")
        for name in ("sa_temperature", "transfer_halflife"):
            if not getattr(self, name) > 0:
                raise AutotuneError(f"xgb option {name} must be above 0, not {getattr(self, name)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise AutotuneError(f"xgb option batch_size must be at least 1 (or None), not {self.batch_size}")

    def saved_model(self) -> CostModel | None:
        """The model `cost_model` names, loaded (None: no cost_model); an AutotuneError saying what to do when
        the file is missing, not a model of `model_kind`, or trained on other features than `features`."""
        if self.cost_model is None:
            return None
        path = os.fspath(self.cost_model)
        if not os.path.exists(path):
            raise AutotuneError(f"cost model {path} does not exist: give a file `autotune train-model` wrote")
        if not os.path.isfile(path):
            raise AutotuneError(f"cost model {path} is not a file: give a file `autotune train-model` wrote")
        try:
            model = cost_model_class(self.model_kind).load(path)
        except AutotuneError:
            raise
        except Exception as err:  # an unreadable or damaged file: whatever its parser raises
            raise model_file_error(path, err) from None
        if model.features != self.features:
            raise AutotuneError(f"cost model {path} was trained on {model.features} features, not {self.features}: "
                                f"give --features {model.features} or a model trained on {self.features} features")
        return model

