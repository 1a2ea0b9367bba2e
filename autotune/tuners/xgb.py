"""Model-guided tuner: a cost model scores configs, simulated annealing searches the space with it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from cost_models.base import CostModel
from cost_models.dataset import throughput
from cost_models.feature_pool import shared_pool
from cost_models.features import FeatureCache
from cost_models.prior import prior_scores

from ..hardware import cpu_model
from ..measure.types import MeasureInput, MeasureResult
from ..records import Record
from ..space import ConfigSpace
from ..task import Task
from ..templates import heuristic_configs, resolve
from .batch import anneal, diverse_top, pick_batch, stale_trials
from .candidates import Candidates
from .elites import donor_configs
from .model_fit import ModelTrainer
from .options import XGBOptions

POOL_SIZE = 256  # unproposed points of one search kept as start candidates of the next
COLD_BATCH = 8  # configs measured before the first model (the model guides from the second batch on)
COLD_POOL = 64  # random configs the cold-start prior picks the first batch from
ELITE_TRIES = 8  # donor configs looked at per config by example (most map onto one already taken)
MIN_SA_STEPS = 2  # annealing steps of the smallest plans (`XGBOptions.sa_full_plan`)


class XGBTuner:
    """Proposes the configs a cost model (XGBoost by default) predicts fastest, found by simulated annealing;
    how, `XGBOptions` says.

    transfer: records of other tasks that pre-train the model (the task's own records take over as they arrive);
    add_transfer() adds more. cache: feature rows shared with other tuners (transfer rows are computed once).
    """

    options_type: ClassVar[type] = XGBOptions
    learns_from_transfer: ClassVar[bool] = True

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0,
                 options: XGBOptions | None = None, transfer: Iterable[Record] = (), cache: FeatureCache | None = None):
        self.options = options = options if options is not None else XGBOptions()
        self.task, self.space, self.template_ref, self.seed = task, space, template_ref, seed
        self.template = resolve(template_ref)
        # the roofline prior reads loop features of CPU schedules
        self.cold_start = options.cold_start if options.features == "loop" and task.target_kind == "llvm" else "random"
        cache = cache if cache is not None else FeatureCache()
        pool = (shared_pool(options.feature_workers) if options.feature_workers > 0 and options.features == "loop"
                else None)
        self._configs = Candidates(task, space, template_ref, self.template, options.features, cache, pool)
        self._rng = np.random.default_rng(seed)
        self._own: dict[int, float] = {}  # index -> best throughput measured (0 for errors)
        self._plan: list[int] = []
        self._leftovers: list[int] = []  # good unproposed points of the last search, rescored as next start points
        self._model: CostModel | None = None
        self._stale = True  # the model has not seen the latest data
        self._own_informative = False  # two of the task's own measurements differ: they train the model
        self._trainer = ModelTrainer(task, template_ref, options, seed, self._configs.rows([]).shape[1], cache, pool,
                                     transfer)
        self._elites: list[list[int]] | None = None  # configs by example, made when first needed
        self._untuned_due = options.untuned_first  # the heuristic config still to be put in a plan

    # ---- data ---------------------------------------------------------------------------

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Add this task's measurements; the model is refitted before the next proposal."""
        for inp, res in zip(inputs, results):
            if inp.task.key != self.task.key:
                continue
            index = inp.config.index
            self._own[index] = max(self._own.get(index, 0.0), throughput(res))
            self._configs.proposed.add(index)
        self._stale = True
        self._plan = []

    def add_transfer(self, records: Iterable[Record]) -> None:
        """Learn from more records of other tasks, as from those given at construction: the model is refitted
        before the next proposal (a plan made before is dropped)."""
        if self._trainer.add_transfer(records):
            self._stale, self._plan, self._elites = True, [], None

    def _refit(self) -> None:
        """Fit on the task's own rows (while two of them differ) and the transfer rows."""
        self._stale = False
        indices = sorted(self._own)
        X, ok = self._configs.measured_rows(indices)
        X, y = X[ok], np.array([self._own[i] for i in indices])[ok]
        self._own_informative = len(np.unique(y)) >= 2
        if not self._own_informative:  # all equal (or none): nothing to rank yet, the transfer rows alone guide
            X, y = X[:0], y[:0]
        self._model = self._trainer.fit(X, y)

    @property
    def model(self) -> CostModel | None:
        """The cost model fitted to all data so far (None while proposals are random); save() it to reuse it."""
        if self._stale:
            self._refit()
        return self._model

    def _score(self, indices: Sequence[int]) -> np.ndarray:
        return self._configs.score(self._model, indices)

    # ---- proposals ----------------------------------------------------------------------

    def next_batch(self, n: int) -> list[int]:
        """Up to n new indices: model-guided picks plus a few random ones (the cold-start rule before any data)."""
        if n <= 0:
            return []
        if self.model is None:  # nothing to learn from yet: a small batch (cold_start), so the model starts early
            n = min(n, COLD_BATCH)
        if len(self._plan) < n:  # update() empties the plan, so a plan never outlives the model it came from
            self._plan = self._make_plan(max(n, self.options.batch_size or 0) if self.model is not None else n)
        batch, self._plan = self._plan[:n], self._plan[n:]
        self._configs.propose(batch)
        return batch

    def _make_plan(self, n: int) -> list[int]:
        head = self._untuned_pick()
        return head + [i for i in self._search_plan(n - len(head)) if i not in head]

    def _untuned_pick(self) -> list[int]:
        """[the template's heuristic config] the first time a plan is made, when it may be proposed and the target
        can run it (`XGBOptions.untuned_first`); else []."""
        if not self._untuned_due:
            return []
        self._untuned_due = False
        index = heuristic_configs(self.template, self.task, count=1)[0].index
        usable = (self._configs.may_propose(index) and self.space.allows(index)
                  and not self._configs.breaks_limits([index])[0])
        return [index] if usable else []

    def _search_plan(self, n: int) -> list[int]:
        if n <= 0:
            return []
        opts, configs = self.options, self._configs
        if self.model is None:
            return self._prior_pick(n) if self.cold_start == "roofline" else configs.draw(n, set(), self._rng)
        elites = self._elite_picks(min(n, opts.transfer_elites)) if not self._own else []
        rest = n - len(elites)
        explore = opts.explore if self._own_informative else max(opts.explore, opts.transfer_explore)
        n_random = int(explore * rest) + int(self._rng.random() < explore * rest % 1)
        n_model = rest - n_random
        starts = self._starts()
        steps = opts.sa_steps if n >= opts.sa_full_plan else max(MIN_SA_STEPS, opts.sa_steps * n // opts.sa_full_plan)
        visited = anneal(self.space, self._score, starts, steps, self._rng, opts.sa_temperature)
        moves = self._incumbent_moves(min(n_model, opts.incumbent_moves))
        taken = elites + moves
        fresh = configs.distinct({i: s for i, s in visited.items() if configs.may_propose(i) and i not in taken}, taken)
        self._leftovers = sorted(fresh, key=lambda i: (-fresh[i], i))[:POOL_SIZE]
        picked = taken + pick_batch(fresh, n_model - len(moves), self.space, opts.knob_weight, opts.min_distance,
                                    self._basin_penalty(fresh), chosen=taken)
        return picked + configs.draw(n - len(picked), set(picked), self._rng)

    def _elite_picks(self, n: int) -> list[int]:
        """Up to n configs by example (`elites.donor_configs`), in the donors' order: of each donor config's
        nearest configs here, the one the model rates best among those it may propose whose scheduled TIR is new
        (`Candidates.distinct`). At most ELITE_TRIES donor configs per pick are looked at."""
        if self._elites is None:
            self._elites = (donor_configs(self.task, self.space, self._trainer.records)
                            if self.options.transfer_elites > 0 else [])
        configs = self._configs
        picks: list[int] = []
        for variants in self._elites[:ELITE_TRIES * n]:
            if len(picks) >= n:
                break
            usable = [i for i in variants if configs.may_propose(i) and i not in picks and self.space.allows(i)]
            usable = [i for i, bad in zip(usable, configs.breaks_limits(usable)) if not bad]
            if not usable:
                continue
            scored = configs.distinct({i: s for i, s in zip(usable, self._score(usable).tolist()) if np.isfinite(s)},
                                      picks)
            if scored:
                picks.append(max(scored, key=lambda i: (scored[i], -i)))
        return picks

    def _incumbent_moves(self, n: int) -> list[int]:
        """The n unmeasured `ConfigSpace.inner_moves` of the best config measured so far that the model rates
        best: the incumbent with a register tile one axis wider or narrower, the rest of its schedule kept."""
        best = max((i for i, t in self._own.items() if t > 0 and i not in self._configs.invalid),
                   key=lambda i: (self._own[i], -i), default=None)
        if best is None or n <= 0:
            return []
        moves = [i for i in self.space.inner_moves(best) if self._configs.may_propose(i)]
        if not moves:
            return []
        scored = self._configs.distinct(dict(zip(moves, self._score(moves).tolist())))
        return diverse_top(scored, n, self.space, knob_weight=0.0, min_distance=self.options.min_distance)

    def _basin_penalty(self, candidates: Iterable[int]) -> dict[int, float]:
        """`basin_weight * sqrt(stale trials of its register tile)` for each candidate whose tile has any."""
        if self.options.basin_weight <= 0:
            return {}
        stale = stale_trials(self._own, self.space)
        tiles = {i: self.space.register_tile(i) for i in candidates}
        return {i: self.options.basin_weight * math.sqrt(stale[t]) for i, t in tiles.items() if stale.get(t)}

    def _prior_pick(self, n: int) -> list[int]:
        """n configs of a random sample of COLD_POOL, picked by the roofline prior as `pick_batch` picks."""
        opts, configs = self.options, self._configs
        pool = configs.draw(max(COLD_POOL, n), set(), self._rng)
        scores = prior_scores(configs.rows(pool), cpu_model(self.task.target))
        scored = configs.distinct(dict(zip(pool, scores.tolist())))
        picked = pick_batch(scored, n - round(opts.cold_random * n), self.space, opts.knob_weight, opts.min_distance)
        return picked + configs.draw(n - len(picked), set(picked), self._rng)

    def _starts(self) -> list[int]:
        """The best measured config of each of the best register tiles for up to half the chains (so the chains
        do not all start around one tile); the others start from the best-scored of earlier searches'
        unproposed points and a fresh random sample (as many as there are chains)."""
        chains, configs = self.options.sa_chains, self._configs
        ranked = sorted((i for i, t in self._own.items() if t > 0 and i not in configs.invalid),
                        key=lambda i: (-self._own[i], i))
        best: list[int] = []
        tiles: set[tuple[int, ...]] = set()
        for i in ranked:
            if len(best) == chains // 2:
                break
            if (tile := self.space.register_tile(i)) not in tiles:
                tiles.add(tile)
                best.append(i)
        pool = [i for i in self._leftovers if configs.may_propose(i)]
        pool += self.space.sample(self._rng, chains, exclude=set(best) | set(pool) | configs.proposed)
        scores = self._score(pool)
        order = sorted(range(len(pool)), key=lambda k: (-scores[k], pool[k]))
        return best + [pool[k] for k in order[: chains - len(best)]]
