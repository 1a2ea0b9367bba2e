"""Model-guided tuner: an XGBoost cost model scores configs, simulated annealing searches the space with it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..measure_types import MeasureInput, MeasureResult
from ..records import Record
from ..space import ConfigSpace
from ..task import Task
from .base import runnable_filter
from .elites import donor_configs

if TYPE_CHECKING:
    from cost_models.dataset import Dataset
    from cost_models.features import FeatureCache
    from cost_models.xgb_model import XGBCostModel

POOL_SIZE = 256  # unproposed points of one search kept as start candidates of the next
SHORTLIST = 0.25  # the batch is picked, for score and knob coverage, from this best share of the search's points
COLD_BATCH = 8  # configs measured before the first model (the model guides from the second batch on)
COLD_POOL = 64  # random configs the cold-start prior picks the first batch from
COLD_STARTS = ("roofline", "random")
ELITE_TRIES = 8  # donor configs looked at per config by example (most map onto one already taken)
TRANSFER_FITS = ("pool", "finetune")
Scorer = Callable[[Sequence[int]], np.ndarray]


def anneal(space: ConfigSpace, score: Scorer, starts: Sequence[int], steps: int, rng: np.random.Generator,
           temperature: float = 1.0) -> dict[int, float]:
    """Parallel simulated annealing from `starts` (one chain each); returns every visited index with its score.

    The temperature starts at `temperature` times the spread of the start scores and falls linearly to 0;
    a chain moves to a random neighbour when it scores higher, or with probability exp(delta / T).
    """
    chains = list(starts)
    scores = score(chains)
    visited = dict(zip(chains, scores.tolist()))
    finite = scores[np.isfinite(scores)]
    t0 = temperature * (float(finite.std()) if len(finite) > 1 and finite.std() > 0 else 1.0)
    for step in range(steps):
        temp = t0 * (1.0 - step / steps) + 1e-12
        moves = [space.neighbour(c, rng) for c in chains]
        new = score(moves)
        visited.update(zip(moves, new.tolist()))
        draws = rng.random(len(chains))
        for c, (old_s, new_s) in enumerate(zip(scores, new)):
            if new_s >= old_s or (np.isfinite(new_s) and draws[c] < math.exp((new_s - old_s) / temp)):
                chains[c], scores[c] = moves[c], new_s
    return visited


def stale_trials(measured: Mapping[int, float], space: ConfigSpace) -> dict[tuple[int, ...], int]:
    """For each register tile (`ConfigSpace.register_tile`) of the `measured` configs (index -> throughput, in
    the order measured): the trials spent on it since the best of them was measured."""
    best: dict[tuple[int, ...], float] = {}
    stale: dict[tuple[int, ...], int] = {}
    for index, value in measured.items():
        tile = space.register_tile(index)
        if tile not in best or value > best[tile]:
            best[tile], stale[tile] = value, 0
        else:
            stale[tile] += 1
    return stale


def diverse_top(candidates: dict[int, float], n: int, space: ConfigSpace, knob_weight: float = 0.1,
                min_distance: int = 1, penalty: Mapping[int, float] | None = None,
                chosen: Sequence[int] = ()) -> list[int]:
    """Diversity-aware batch: greedily the index whose score percentile among the candidates, plus
    `knob_weight` for each knob value (and each innermost split factor, `ConfigSpace.coverage`) that no
    index picked so far has, minus its `penalty` if any, is highest (a submodular pick).

    A pick within `min_distance` knob changes of an earlier one (or of one already `chosen` for the batch) is
    taken only when nothing else is left.
    The coverage bonus keeps a batch from spending all its trials on the cheap knobs (unroll, loop order)
    or the outer tiles of one register tile the model likes: it also tries the next best register tiles.
    """
    ranked = sorted((i for i, s in candidates.items() if np.isfinite(s)), key=lambda i: (-candidates[i], i))
    if not ranked or n <= 0:
        return []
    digits = np.array([space.digits(i) for i in ranked])
    cover = np.array([space.coverage(i) for i in ranked])
    gain_base = 1.0 - np.arange(len(ranked)) / len(ranked)  # score percentile, 1 for the best
    if penalty:
        gain_base -= np.array([penalty.get(i, 0.0) for i in ranked])
    covered = np.zeros_like(cover, dtype=bool)  # covered[r, c]: candidate r's value c is in the batch
    near = np.zeros(len(ranked), dtype=bool)  # within min_distance of a pick
    taken = np.zeros(len(ranked), dtype=bool)
    for c in chosen:
        covered |= cover == np.array(space.coverage(c))
        near |= (digits != np.array(space.digits(c))).sum(axis=1) < min_distance
    picked: list[int] = []
    for _ in range(min(n, len(ranked))):
        gain = gain_base + knob_weight * (~covered).sum(axis=1) - 2.0 * near  # near-duplicates: only as a last resort
        gain[taken] = -np.inf
        r = int(np.argmax(gain))
        picked.append(ranked[r])
        taken[r] = True
        covered |= cover == cover[r]
        near |= (digits != digits[r]).sum(axis=1) < min_distance
    return picked


def pick_batch(scored: dict[int, float], n: int, space: ConfigSpace, knob_weight: float = 0.1,
               min_distance: int = 1, penalty: Mapping[int, float] | None = None,
               chosen: Sequence[int] = ()) -> list[int]:
    """The model's picks of a batch: `diverse_top` over the best SHORTLIST share of the scored points
    (at least 4n of them), so the coverage bonus trades score only among configs the model rates well."""
    ranked = sorted(scored, key=lambda i: (-scored[i], i))
    shortlist = {i: scored[i] for i in ranked[: max(4 * n, int(SHORTLIST * len(ranked)))]}
    return diverse_top(shortlist, n, space, knob_weight, min_distance, penalty, chosen)


def training_rows(X: np.ndarray, y: np.ndarray, transfer: Dataset | None, halflife: float):
    """The task's own rows (group 0) and the transfer rows (their groups + 1) with their weights: each own row
    weighs `max(1, n_transfer / halflife)`, each transfer row 1, so after `halflife` own records the task's
    own data weigh as much as all transferred data. Returns (X, y, groups, weights)."""
    n_transfer = len(transfer) if transfer is not None else 0
    parts = [(X, y, np.zeros(len(y), int), np.full(len(y), max(1.0, n_transfer / halflife)))]
    if transfer is not None:
        parts.append((transfer.X, transfer.y, transfer.groups + 1, np.ones(n_transfer)))
    return tuple(np.concatenate(p) for p in zip(*parts))


class XGBTuner:
    """Proposes the configs an XGBoost cost model predicts fastest, found by simulated annealing.

    features: "loop" (TIR loop-nest features; transfer works across operators) or "knob" (config values).
    transfer: records of other tasks that pre-train the model; the task's own records take over as they
    arrive, as `transfer_fit` says: "pool" fits one model on both, own rows weighing `n_transfer /
    transfer_halflife` each (so at `transfer_halflife` own records both weigh the same); "finetune" fits a model
    on the transfer records once and then, at each refit, adds `finetune_rounds` trees fitted on the task's own
    records alone to it (the own trees correct the pre-trained ranking where the task's measurements contradict
    it). cost_model: path of a saved model whose trees the new ones are added to.
    batch_size: configs planned per model refresh; next_batch serves from that plan until update().
    explore: share of each batch drawn at random; transfer_explore: that share while only transfer records (or
    the loaded model) guide the search, before two of the task's own measurements differ: a hedge against records
    that mis-rank a new operator, and an unbiased first sample for the task's own model.
    knob_weight: bonus for each knob value new to a batch (diversity; 0 picks the top predictions);
    min_distance: knob changes between two configs of one batch.
    basin_weight: a candidate's score percentile is lowered by `basin_weight * sqrt(s)`, s the trials spent on
    its register tile since that tile's best measurement (`stale_trials`): the model cannot rank the configs
    near the top, so a register tile that stopped improving gives way to untried ones rather than taking a large
    share of the trials for the rest of the run (0: off; on by default because more runs, cold and with transfer,
    reached a good config with it in side-by-side runs; see docs/experiments.md).
    cold_start: how the first batch is picked while nothing guides the search (no model, no transfer):
    "random" (the default) or "roofline" (CPU targets, loop features): the best of COLD_POOL random configs by
    `cost_models.prior`'s roofline estimate, with the batch's diversity rule (not the default: it starts faster,
    most on convolutions, but GEMM runs can end lower; see docs/experiments.md). cold_random:
    the share of a roofline first batch drawn at random instead (a hedge where the estimate mis-ranks).
    incumbent_moves: slots of each model-guided batch for the best config measured so far with one split knob's
    innermost factor changed (`ConfigSpace.inner_moves`, the model's best-rated unmeasured ones): a register
    tile the model rates low because its few measurements had bad outer tilings is tried in the incumbent's
    schedule (0: off; on by default because cold runs ended with faster configs on matmul and conv2d, and no
    worse on dense, in side-by-side runs; see docs/experiments.md).
    transfer_elites: configs of the first batch taken from the transfer records by example (`elites`): the fastest
    configs of the other tasks whose template has this space's knobs, mapped onto this space (where a knob value
    maps to several configs, the one the model rates best), before the model's picks (0: off; on by default
    because it reached a good config in far fewer trials than a cold start in side-by-side runs; see
    docs/experiments.md).
    sa_chains x sa_steps bounds the configs scored per plan (loop features cost ~5-10 ms each to compute).
    feature_workers: processes computing loop features, shared by all tuners of this process (0: in process;
    workers help a little on two idle cores and more on many cores).
    """

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0, features: str = "loop",
                 transfer: Iterable[Record] = (), cost_model: str | None = None, batch_size: int | None = None,
                 objective: str = "rank", explore: float = 0.15, transfer_explore: float = 0.5, sa_chains: int = 16,
                 sa_steps: int = 16, sa_temperature: float = 1.0, knob_weight: float = 0.1, min_distance: int = 1,
                 basin_weight: float = 0.05, transfer_halflife: int = 16, transfer_max_per_task: int = 512,
                 n_rounds: int = 200, feature_workers: int = 0, cache: FeatureCache | None = None,
                 cold_start: str = "random", cold_random: float = 0.0, incumbent_moves: int = 2,
                 transfer_fit: str = "pool", finetune_rounds: int = 200, transfer_elites: int = 4):
        import search_spaces
        from cost_models.features import KINDS, FeatureCache

        if features not in KINDS:
            raise ValueError(f"unknown feature kind {features!r}; choose one of {', '.join(KINDS)}")
        if cold_start not in COLD_STARTS:
            raise ValueError(f"unknown cold start {cold_start!r}; choose one of {', '.join(COLD_STARTS)}")
        if transfer_fit not in TRANSFER_FITS:
            raise ValueError(f"unknown transfer fit {transfer_fit!r}; choose one of {', '.join(TRANSFER_FITS)}")
        if not 0.0 <= cold_random <= 1.0:
            raise ValueError(f"cold_random is a share of the batch (0 to 1), not {cold_random}")
        self.task, self.space, self.template_ref = task, space, template_ref
        self.template = search_spaces.resolve(template_ref)
        self._runnable = runnable_filter(task, space, template_ref)  # None: the target has no limits to check
        self.features, self.objective, self.seed = features, objective, seed
        self.batch_size = batch_size
        self.explore, self.transfer_explore = explore, transfer_explore
        self.knob_weight, self.min_distance, self.basin_weight = knob_weight, min_distance, basin_weight
        self.sa_chains, self.sa_steps, self.sa_temperature = sa_chains, sa_steps, sa_temperature
        self.transfer_halflife, self.n_rounds = transfer_halflife, n_rounds
        self.transfer_fit, self.finetune_rounds = transfer_fit, finetune_rounds
        self.cold_start = cold_start if features == "loop" and task.target_kind == "llvm" else "random"
        self.cold_random = cold_random
        self.incumbent_moves = incumbent_moves
        self.cache = cache if cache is not None else FeatureCache()
        self._rng = np.random.default_rng(seed)
        self._feature_pool = None
        if feature_workers > 0 and features == "loop":
            from cost_models.feature_pool import shared_pool

            self._feature_pool = shared_pool(feature_workers)
        self._proposed: set[int] = set()
        self._proposed_rows: set[bytes] = set()  # loop-feature rows of proposed configs (same TIR = same row)
        self._invalid: set[int] = set()  # the template rejects them: never proposed
        self._own: dict[int, float] = {}  # index -> best throughput measured (0 for errors)
        self._plan: list[int] = []
        self._leftovers: list[int] = []  # good unproposed points of the last search, rescored as next start points
        self._model: XGBCostModel | None = None
        self._stale = True  # the model has not seen the latest data
        self._own_informative = False  # two of the task's own measurements differ: they train the model
        self._base = self._load_base(cost_model)
        transfer = list(transfer)
        self._transfer = self._transfer_data(transfer, transfer_max_per_task)
        self.transfer_elites = transfer_elites
        self._elites = donor_configs(task, space, transfer) if transfer_elites > 0 else []
        self._pretrained: XGBCostModel | None = None  # "finetune": the model of the transfer records (and base)

    # ---- data ---------------------------------------------------------------------------

    def _load_base(self, path: str | None) -> XGBCostModel | None:
        if path is None:
            return None
        from cost_models.xgb_model import XGBCostModel

        model = XGBCostModel.load(path)
        if model.features != self.features:
            raise ValueError(f"cost model {path} was trained on {model.features} features, not {self.features}")
        return model

    def _transfer_data(self, records: Iterable[Record], max_per_task: int):
        from cost_models.dataset import records_dataset

        others = [r for r in records if r.task.key != self.task.key
                  and (self.features == "loop" or r.input.template == self.template_ref)]
        if not others:
            return None
        data = records_dataset(others, self.features, max_per_task, self.seed, self.cache, self._feature_pool)
        if len(data) and data.X.shape[1] != self._features([]).shape[1]:
            raise ValueError("transfer records have features of another length than this task's")
        return data if len(data) else None

    def _features(self, indices: Sequence[int]) -> np.ndarray:
        from cost_models.features import extract

        return extract(self.task, self.template, self.space, indices, self.features, self.cache, self._feature_pool)

    def _breaks_limits(self, indices: Sequence[int]) -> np.ndarray:
        """Mask of configs the target cannot run (e.g. too many GPU threads): never proposed."""
        if self._runnable is None:
            return np.zeros(len(indices), dtype=bool)
        return np.array([not self._runnable(i) for i in indices], dtype=bool)

    def _score(self, indices: Sequence[int]) -> np.ndarray:
        X = self._features(indices)
        bad = ~np.isfinite(X).all(axis=1) | self._breaks_limits(indices)
        self._invalid.update(i for i, b in zip(indices, bad) if b)
        scores = self._model.predict(X)
        scores[bad] = -np.inf
        return scores

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Add this task's measurements; the model is refitted before the next proposal."""
        from cost_models.dataset import throughput

        for inp, res in zip(inputs, results):
            if inp.task.key != self.task.key:
                continue
            index = inp.config.index
            self._own[index] = max(self._own.get(index, 0.0), throughput(res))
            self._proposed.add(index)
        self._stale = True
        self._plan = []

    def _refit(self) -> None:
        """Fit on own rows and transfer rows (`transfer_fit`), on top of the loaded model if any."""
        self._stale = False
        indices = sorted(self._own)
        X = self._features(indices)
        ok = np.isfinite(X).all(axis=1)
        self._invalid.update(i for i, good in zip(indices, ok) if not good)
        if self.features == "loop":  # measured configs (also those of a resumed log) mark their rows as taken
            self._proposed_rows.update(row.tobytes() for row in X[ok])
        X, y = X[ok], np.array([self._own[i] for i in indices])[ok]
        own_informative = self._own_informative = len(np.unique(y)) >= 2
        if not own_informative and self._transfer is None:
            self._model = self._base  # None: random proposals until two measurements differ
            return
        if not own_informative:  # all equal (or none): nothing to rank yet, the transfer rows alone guide
            X, y = X[:0], y[:0]
        if self.transfer_fit == "finetune" and self._transfer is not None:
            if self._pretrained is None:
                t = self._transfer
                self._pretrained = self._new_model(self.n_rounds).fit(t.X, t.y, t.groups, init_model=self._base)
            self._model = (self._new_model(self.finetune_rounds).fit(X, y, np.zeros(len(y), int),
                                                                      init_model=self._pretrained)
                           if own_informative else self._pretrained)
            return
        Xs, ys, gs, ws = training_rows(X, y, self._transfer, self.transfer_halflife)
        self._model = self._new_model(self.n_rounds).fit(Xs, ys, gs, ws, init_model=self._base)

    def _new_model(self, n_rounds: int) -> XGBCostModel:
        """An unfitted model of this tuner's objective and features; a loaded bag of boosters stays one (each
        booster continues on this task's data)."""
        from cost_models.xgb_model import XGBCostModel

        shape = {k: getattr(self._base, k) for k in ("bag", "subsample", "colsample_bytree")} if self._base else {}
        return XGBCostModel(objective=self.objective, features=self.features, n_rounds=n_rounds, seed=self.seed,
                            **shape)

    @property
    def model(self) -> XGBCostModel | None:
        """The cost model fitted to all data so far (None while proposals are random); save() it to reuse it."""
        if self._stale:
            self._refit()
        return self._model

    # ---- proposals ----------------------------------------------------------------------

    def next_batch(self, n: int) -> list[int]:
        """Up to n new indices: model-guided picks plus a few random ones (the cold-start rule before any data)."""
        if n <= 0:
            return []
        if self.model is None:  # nothing to learn from yet: a small batch (cold_start), so the model starts early
            n = min(n, COLD_BATCH)
        if len(self._plan) < n:  # update() empties the plan, so a plan never outlives the model it came from
            self._plan = self._make_plan(max(n, self.batch_size or 0) if self.model is not None else n)
        batch, self._plan = self._plan[:n], self._plan[n:]
        self._proposed.update(batch)
        if self.features == "loop" and batch:
            self._proposed_rows.update(row.tobytes() for row in self._features(batch))
        return batch

    def _make_plan(self, n: int) -> list[int]:
        if self.model is None:
            return self._prior_pick(n) if self.cold_start == "roofline" else self._random(n, set())
        elites = self._elite_picks(min(n, self.transfer_elites)) if not self._own else []
        rest = n - len(elites)
        explore = self.explore if self._own_informative else max(self.explore, self.transfer_explore)
        n_random = int(explore * rest) + int(self._rng.random() < explore * rest % 1)
        n_model = rest - n_random
        starts = self._starts()
        visited = anneal(self.space, self._score, starts, self.sa_steps, self._rng, self.sa_temperature)
        moves = self._incumbent_moves(min(n_model, self.incumbent_moves))
        taken = elites + moves
        fresh = self._distinct({i: s for i, s in visited.items()
                                if i not in self._proposed and i not in self._invalid and i not in taken}, taken)
        self._leftovers = sorted(fresh, key=lambda i: (-fresh[i], i))[:POOL_SIZE]
        picked = taken + pick_batch(fresh, n_model - len(moves), self.space, self.knob_weight, self.min_distance,
                                    self._basin_penalty(fresh), chosen=taken)
        return picked + self._random(n - len(picked), set(picked))

    def _elite_picks(self, n: int) -> list[int]:
        """Up to n configs by example (`elites.donor_configs`), in the donors' order: of each donor config's
        nearest configs here, the one the model rates best among those it may propose whose scheduled TIR is new
        (`_distinct`). At most ELITE_TRIES donor configs per pick are looked at."""
        picks: list[int] = []
        for variants in self._elites[:ELITE_TRIES * n]:
            if len(picks) >= n:
                break
            usable = [i for i in variants if i not in self._proposed and i not in self._invalid and i not in picks
                      and self.space.allows(i)]
            usable = [i for i, bad in zip(usable, self._breaks_limits(usable)) if not bad]
            if not usable:
                continue
            scored = self._distinct({i: s for i, s in zip(usable, self._score(usable).tolist()) if np.isfinite(s)},
                                    picks)
            if scored:
                picks.append(max(scored, key=lambda i: (scored[i], -i)))
        return picks

    def _incumbent_moves(self, n: int) -> list[int]:
        """The n unmeasured `ConfigSpace.inner_moves` of the best config measured so far that the model rates
        best: the incumbent with a register tile one axis wider or narrower, the rest of its schedule kept."""
        best = max((i for i, t in self._own.items() if t > 0 and i not in self._invalid),
                   key=lambda i: (self._own[i], -i), default=None)
        if best is None or n <= 0:
            return []
        moves = [i for i in self.space.inner_moves(best) if i not in self._proposed and i not in self._invalid]
        if not moves:
            return []
        scored = self._distinct(dict(zip(moves, self._score(moves).tolist())))
        return diverse_top(scored, n, self.space, knob_weight=0.0, min_distance=self.min_distance)

    def _basin_penalty(self, candidates: Iterable[int]) -> dict[int, float]:
        """`basin_weight * sqrt(stale trials of its register tile)` for each candidate whose tile has any."""
        if self.basin_weight <= 0:
            return {}
        stale = stale_trials(self._own, self.space)
        tiles = {i: self.space.register_tile(i) for i in candidates}
        return {i: self.basin_weight * math.sqrt(stale[t]) for i, t in tiles.items() if stale.get(t)}

    def _prior_pick(self, n: int) -> list[int]:
        """n configs of a random sample of COLD_POOL, picked by the roofline prior as `pick_batch` picks."""
        from cost_models.prior import prior_scores

        from ..hardware import cpu_model

        pool = self._random(max(COLD_POOL, n), set())
        scores = prior_scores(self._features(pool), cpu_model(self.task.target))
        scored = self._distinct(dict(zip(pool, scores.tolist())))
        picked = pick_batch(scored, n - round(self.cold_random * n), self.space, self.knob_weight, self.min_distance)
        return picked + self._random(n - len(picked), set(picked))

    def _distinct(self, scored: dict[int, float], taken: Sequence[int] = ()) -> dict[int, float]:
        """With loop features, one config per distinct row, none with the row of a proposed config (or of one
        `taken` for the batch being planned).

        Knob values that leave the scheduled TIR unchanged (e.g. an unroll limit above every loop's extent)
        give the same row: measuring the twin of a measured config teaches nothing and costs a trial.
        """
        if self.features != "loop" or not scored:
            return scored
        order = sorted(scored, key=lambda i: (-scored[i], i))
        seen = self._proposed_rows | {row.tobytes() for row in self._features(list(taken))}
        out = {}
        for i, row in zip(order, self._features(order)):
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                out[i] = scored[i]
        return out

    def _starts(self) -> list[int]:
        """The best measured config of each of the best register tiles for up to half the chains (so the chains
        do not all start around one tile); the others start from the best-scored of earlier searches'
        unproposed points and a fresh random sample (as many as there are chains)."""
        ranked = sorted((i for i, t in self._own.items() if t > 0 and i not in self._invalid),
                        key=lambda i: (-self._own[i], i))
        best: list[int] = []
        tiles: set[tuple[int, ...]] = set()
        for i in ranked:
            if len(best) == self.sa_chains // 2:
                break
            if (tile := self.space.register_tile(i)) not in tiles:
                tiles.add(tile)
                best.append(i)
        pool = [i for i in self._leftovers if i not in self._proposed and i not in self._invalid]
        pool += self.space.sample(self._rng, self.sa_chains, exclude=set(best) | set(pool) | self._proposed)
        scores = self._score(pool)
        order = sorted(range(len(pool)), key=lambda k: (-scores[k], pool[k]))
        return best + [pool[k] for k in order[: self.sa_chains - len(best)]]

    def _random(self, n: int, taken: set[int]) -> list[int]:
        """n random indices never proposed; with loop features, only configs the template accepts."""
        out: list[int] = []
        for _ in range(8):
            if len(out) >= n:
                break
            exclude = self._proposed | self._invalid | taken | set(out)
            cands = self.space.sample(self._rng, 2 * (n - len(out)), exclude=exclude)
            if not cands:
                break
            cands = [cands[k] for k in self._rng.permutation(len(cands))]
            broken = self._breaks_limits(cands)
            self._invalid.update(i for i, b in zip(cands, broken) if b)
            cands = [i for i, b in zip(cands, broken) if not b]
            if self.features == "loop":
                ok = np.isfinite(self._features(cands)).all(axis=1)
                self._invalid.update(i for i, good in zip(cands, ok) if not good)
                cands = [i for i, good in zip(cands, ok) if good]
            out += cands[: n - len(out)]
        return out
