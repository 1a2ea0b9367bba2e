"""XGBTuner with fake measurements (a known cost function of the config; nothing is compiled)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.records import Record
from autotune.task import make_task
from autotune.tuners import make_tuner
from autotune.tuners.batch import anneal, diverse_top, stale_trials
from autotune.tuners.model_fit import training_rows
from autotune.tuners.options import COLD_STARTS, XGBOptions
from autotune.tuners.xgb import COLD_BATCH, XGBTuner
from cost_models import rank_correlation, train_from_records
from tests.toy_template import (
    TOY_CONV2D,
    TOY_CONV2D_REF,
    TOY_MATMUL,
    TOY_MATMUL_REF,
    TOY_MATMUL_TWINS,
    TOY_MATMUL_TWINS_REF,
    toy_matmul_cost,
)

MM = make_task("matmul", {"M": 256, "N": 256, "K": 256})
OTHER_MM = make_task("matmul", {"M": 128, "N": 512, "K": 256})
MM_SPACE = TOY_MATMUL.define_space(MM)
TINY_CONV = make_task("conv2d", {"C": 4, "H": 6, "W": 6, "K": 4, "R": 3, "S": 3, "padding": 0})


def _xgb(task=MM, space=MM_SPACE, ref=TOY_MATMUL_REF, seed=0, transfer=(), **options) -> XGBTuner:
    return make_tuner("xgb", task, space, ref, seed=seed, options=XGBOptions(**options), transfer=transfer)


def _measure(task, space, indices, ref=TOY_MATMUL_REF):
    inputs = [MeasureInput(task, space.get(i), ref) for i in indices]
    results = []
    for inp in inputs:
        cost = toy_matmul_cost(task, inp.config)
        results.append(MeasureResult((cost,), None, "", 0.0, 0.0) if cost is not None
                       else MeasureResult(None, ErrorKind.INVALID_CONFIG, "too wide", 0.0, 0.0))
    return inputs, results


def _tune(tuner, task, space, trials: int, batch: int = 16) -> list[int]:
    seen: list[int] = []
    while len(seen) < trials:
        indices = tuner.next_batch(batch)
        assert indices and len(indices) <= batch
        assert not set(indices) & set(seen) and len(set(indices)) == len(indices)
        tuner.update(*_measure(task, space, indices))
        seen += indices
    return seen


def _best_cost(task, space, indices) -> float:
    costs = [toy_matmul_cost(task, space.get(i)) for i in indices]
    return min(c for c in costs if c is not None)


def _optimum(task, space) -> float:
    return _best_cost(task, space, range(len(space)))


def test_never_repeats_and_respects_n_until_the_space_is_exhausted():
    space = TOY_CONV2D.define_space(TINY_CONV)
    tuner = _xgb(TINY_CONV, space, TOY_CONV2D_REF, seed=0, features="knob", sa_chains=4, sa_steps=4)
    seen: list[int] = []
    for n in (3, 5, 1, 7, 100):
        batch = tuner.next_batch(n)
        assert len(batch) == min(n, len(space) - len(seen))
        assert not set(batch) & set(seen)
        seen += batch
        inputs = [MeasureInput(TINY_CONV, space.get(i), TOY_CONV2D_REF) for i in batch]
        tuner.update(inputs, [MeasureResult((1.0 + i,), None, "", 0.0, 0.0) for i in batch])
    assert sorted(seen) == list(range(len(space)))
    assert tuner.next_batch(4) == []


def test_same_seed_same_proposals_other_seed_other_proposals():
    runs = [_tune(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=s, features="loop", sa_chains=8, sa_steps=8),
                  MM, MM_SPACE, 32) for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_random_proposals_without_data():
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0)
    first = tuner.next_batch(8)
    assert len(first) == 8 and tuner.model is None
    # Only errors: nothing to learn from, so still random (and still no repeats).
    inputs = [MeasureInput(MM, MM_SPACE.get(i), TOY_MATMUL_REF) for i in first]
    tuner.update(inputs, [MeasureResult(None, ErrorKind.RUNTIME_ERROR, "x", 0.0, 0.0) for _ in first])
    second = tuner.next_batch(8)
    assert tuner.model is None and len(second) == 8 and not set(first) & set(second)
    tuner.update(*_measure(MM, MM_SPACE, second))
    assert tuner.model is not None


def test_loop_features_never_propose_illegal_configs():
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=3, features="loop", sa_chains=8, sa_steps=8)
    seen = _tune(tuner, MM, MM_SPACE, 48)
    assert all(toy_matmul_cost(MM, MM_SPACE.get(i)) is not None for i in seen)


def test_batch_has_no_near_duplicates():
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=4, features="knob", explore=0.0, min_distance=2)
    _tune(tuner, MM, MM_SPACE, 32)
    digits = [np.array(MM_SPACE.digits(i)) for i in tuner.next_batch(16)]
    assert min(int((a != b).sum()) for k, a in enumerate(digits) for b in digits[k + 1:]) >= 2


def test_model_never_proposes_the_twin_of_a_proposed_config():
    """Configs that schedule the same TIR (same loop-feature row) are measured once."""
    space = TOY_MATMUL_TWINS.define_space(MM)
    tuner = _xgb(MM, space, TOY_MATMUL_TWINS_REF, seed=5, features="loop", explore=0.0, sa_chains=8, sa_steps=8)
    seen = _tune(tuner, MM, space, 40, batch=8)
    twin = {i: space.index_of([*space.digits(i)[:-1], 1 - space.digits(i)[-1]]) for i in seen}
    assert not [i for k, i in enumerate(seen) if k >= COLD_BATCH and twin[i] in seen[:k]]


@pytest.mark.parametrize("features,seeds", [("knob", range(6)),
                                            pytest.param("loop", range(3), marks=pytest.mark.slow)])
def test_finds_better_configs_than_random_search(features, seeds):
    trials, optimum = 64, _optimum(MM, MM_SPACE)
    model_regret, random_regret = [], []
    for seed in seeds:
        tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=seed, features=features)
        model_regret.append(_best_cost(MM, MM_SPACE, _tune(tuner, MM, MM_SPACE, trials)) / optimum)
        rand = MM_SPACE.sample(np.random.default_rng(seed), trials)
        random_regret.append(_best_cost(MM, MM_SPACE, rand) / optimum)
    assert np.mean(model_regret) < 0.6 * np.mean(random_regret), (model_regret, random_regret)


def _other_task_records(n: int) -> list[Record]:
    space = TOY_MATMUL.define_space(OTHER_MM)
    indices = space.sample(np.random.default_rng(9), n)
    return [Record(i, r, TOY_MATMUL.version, 1, {}) for i, r in zip(*_measure(OTHER_MM, space, indices))]


def _first_batch_cost(tuner) -> float:
    costs = [toy_matmul_cost(MM, MM_SPACE.get(i)) for i in tuner.next_batch(16)]
    return float(np.median([c if c is not None else np.inf for c in costs]))


def test_transfer_records_guide_the_first_batch():
    transfer = _other_task_records(160)
    guided = [_first_batch_cost(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=s, transfer=transfer, sa_chains=8,
                                         sa_steps=12, transfer_explore=0.15)) for s in range(2)]
    blind = [_first_batch_cost(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=s)) for s in range(2)]
    assert np.mean(guided) < 0.7 * np.mean(blind), (guided, blind)


def _batch_best(tuner) -> float:
    return min(c for i in tuner.next_batch(16) if (c := toy_matmul_cost(MM, MM_SPACE.get(i))) is not None)


@pytest.mark.slow
def test_random_share_of_transfer_batches_limits_misleading_records():
    """Records that rank this task backwards (the slowest first) steer the model's picks to slow configs; half
    the batch drawn at random still finds fast ones (the median over seeds: in some, nothing in the batch beats
    the untuned config that every first batch holds)."""
    space = TOY_MATMUL.define_space(OTHER_MM)
    inputs, results = _measure(OTHER_MM, space, space.sample(np.random.default_rng(9), 160))
    inverted = [MeasureResult((1e-6 / r.mean_s,), None, "", 0.0, 0.0) if r.ok else r for r in results]
    wrong = [Record(i, r, TOY_MATMUL.version, 1, {}) for i, r in zip(inputs, inverted)]
    options = {"transfer": wrong, "sa_chains": 8, "sa_steps": 12}
    misled = [_batch_best(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=s, transfer_explore=0.15, **options))
              for s in range(6)]
    hedged = [_batch_best(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=s, **options)) for s in range(6)]
    assert np.median(hedged) < 0.7 * np.median(misled), (hedged, misled)


def test_finetune_adds_own_trees_that_correct_misleading_transfer():
    """transfer_fit="finetune": the transfer records are fitted once; each refit adds finetune_rounds trees fitted
    on the task's own records, which rank the task right even where the transferred ranking is backwards."""
    space = TOY_MATMUL.define_space(OTHER_MM)
    inputs, results = _measure(OTHER_MM, space, space.sample(np.random.default_rng(9), 160))
    inverted = [MeasureResult((1e-6 / r.mean_s,), None, "", 0.0, 0.0) if r.ok else r for r in results]
    wrong = [Record(i, r, TOY_MATMUL.version, 1, {}) for i, r in zip(inputs, inverted)]
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, transfer=wrong, transfer_fit="finetune", sa_chains=4,
                     sa_steps=4)
    pretrained = tuner.model
    assert [b.num_boosted_rounds() for b in pretrained.boosters_] == [tuner.options.n_rounds]
    sample = MM_SPACE.sample(np.random.default_rng(3), 120)
    tuner.update(*_measure(MM, MM_SPACE, sample[:60]))
    tuned = tuner.model
    assert tuner._trainer.pretrained is pretrained  # fitted once, not per refit
    rounds = tuner.options.n_rounds + tuner.options.finetune_rounds
    assert [b.num_boosted_rounds() for b in tuned.boosters_] == [rounds]
    held = [i for i in sample[60:] if toy_matmul_cost(MM, MM_SPACE.get(i)) is not None]
    speed = [-toy_matmul_cost(MM, MM_SPACE.get(i)) for i in held]
    X = tuner._configs.rows(held)
    before, after = rank_correlation(pretrained.predict(X), speed), rank_correlation(tuned.predict(X), speed)
    assert before < 0 < after, (before, after)
    with pytest.raises(ValueError, match="transfer fit"):
        _xgb(MM, MM_SPACE, TOY_MATMUL_REF, transfer_fit="mix")


def test_saved_cost_model_guides_the_first_batch(tmp_path):
    path = tmp_path / "model.json"
    train_from_records(_other_task_records(160), features="loop").save(path)
    guided = _first_batch_cost(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, cost_model=str(path), sa_chains=8,
                                        sa_steps=12, transfer_explore=0.15))
    blind = _first_batch_cost(_xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0))
    assert guided < 0.7 * blind
    with pytest.raises(ValueError, match="loop features"):
        _xgb(MM, MM_SPACE, TOY_MATMUL_REF, cost_model=str(path), features="knob")


def test_a_loaded_bag_of_boosters_is_continued_whole(tmp_path):
    path = tmp_path / "bag.json"
    train_from_records(_other_task_records(160), features="loop", n_rounds=20, bag=2, subsample=0.8).save(path)
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, cost_model=str(path), sa_chains=4, sa_steps=4)
    tuner.update(*_measure(MM, MM_SPACE, tuner.next_batch(8)))
    model = tuner.model
    assert (model.bag, model.subsample) == (2, 0.8)
    assert [b.num_boosted_rounds() for b in model.boosters_] == [20 + tuner.options.n_rounds] * 2


def test_batch_size_plans_ahead_until_the_next_update():
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=5, features="knob", batch_size=12)
    tuner.update(*_measure(MM, MM_SPACE, MM_SPACE.sample(np.random.default_rng(0), 16)))
    parts = [tuner.next_batch(4) for _ in range(3)]
    again = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=5, features="knob", batch_size=12)
    again.update(*_measure(MM, MM_SPACE, MM_SPACE.sample(np.random.default_rng(0), 16)))
    assert [i for p in parts for i in p] == again.next_batch(12)


def test_anneal_climbs_a_known_score():
    target = MM_SPACE.digits(1234)

    def score(indices):
        return np.array([-sum(a != b for a, b in zip(MM_SPACE.digits(i), target)) for i in indices], float)

    visited = anneal(MM_SPACE, score, MM_SPACE.sample(np.random.default_rng(0), 8), 40, np.random.default_rng(0))
    assert 1234 in visited
    assert diverse_top(visited, 1, MM_SPACE) == [1234]


def test_diverse_top_covers_new_knob_values_before_refining_one_shape():
    """Twelve configs share their tile sizes and differ in parallel / vectorize / unroll; a thirteenth, scored
    fourth, differs in every knob. With the coverage bonus a batch of 3 takes it; without, the top 3."""
    base = MM_SPACE.digits(MM_SPACE.sample(np.random.default_rng(1), 1)[0])
    names = [k.name for k in MM_SPACE.knobs]
    cheap = [names.index(k) for k in ("parallel", "vectorize", "unroll")]
    same = []
    for values in itertools.product(*(range(MM_SPACE.dims[k]) for k in cheap)):
        d = list(base)
        for k, v in zip(cheap, values):
            d[k] = v
        same.append(MM_SPACE.index_of(d))
    first = MM_SPACE.digits(same[0])
    other = MM_SPACE.index_of([(v + 1) % dim for v, dim in zip(first, MM_SPACE.dims)])
    ranked = same[:3] + [other] + same[3:]
    scores = {i: float(len(ranked) - k) for k, i in enumerate(ranked)}
    picked = diverse_top(scores, 3, MM_SPACE)
    assert picked[0] == same[0] and other in picked
    assert diverse_top(scores, 3, MM_SPACE, knob_weight=0.0) == same[:3]
    assert set(diverse_top(scores, 99, MM_SPACE)) == set(scores)


def test_diverse_top_tries_another_register_tile_before_other_outer_tilings_of_one():
    """Forty configs differ only in a three-way tiling of one axis; all but the fourth share their innermost
    factor. Each new tiling is a new knob value, but only the fourth brings a new innermost factor (on the CPU,
    a new register tile): the second pick of a batch is that one, though it scores below two others."""
    from autotune.space import ConfigSpace, choice_knob, split_knob

    space = ConfigSpace((split_knob("tile", 20160, 3), choice_knob("unroll", (0, 64))))
    tile = space["tile"]
    same = [space.index_of([d, 0]) for d, c in enumerate(tile.candidates) if c[-1] == 4][:39]
    other = space.index_of([next(d for d, c in enumerate(tile.candidates) if c[-1] == 8), 0])
    ranked = same[:3] + [other] + same[3:]
    scores = {i: float(len(ranked) - k) for k, i in enumerate(ranked)}
    assert space.coverage(other)[-1] == 8 and space.coverage(other)[:2] == space.digits(other)
    assert diverse_top(scores, 2, space) == [same[0], other]
    assert diverse_top(scores, 2, space, knob_weight=0.0) == same[:2]


def _tile_space():
    from autotune.space import ConfigSpace, choice_knob, split_knob

    space = ConfigSpace((split_knob("tile", 20160, 3), choice_knob("unroll", (0, 64))))
    by_tile: dict[int, list[int]] = {}
    for d, c in enumerate(space["tile"].candidates):
        by_tile.setdefault(c[-1], []).append(space.index_of([d, 0]))
    return space, by_tile


def test_stale_trials_count_the_trials_of_a_register_tile_since_its_best():
    space, by_tile = _tile_space()
    a, b = by_tile[4], by_tile[8]
    assert space.register_tile(a[0]) == (4,) and space.register_tile(b[0]) == (8,)
    measured = {a[0]: 1.0, a[1]: 3.0, b[0]: 2.0, a[2]: 2.5, a[3]: 0.0, b[1]: 2.5, a[4]: 1.0}
    assert stale_trials(measured, space) == {(4,): 3, (8,): 0}


def test_a_stale_register_tile_gives_way_in_the_batch():
    """Scores rank three configs of tile 4 above one of tile 8, then 36 more of tile 4; with tile 4 stale for
    16 trials and a penalty of 0.05 * sqrt(16), the tile-8 config is the first pick; without, the fourth."""
    space, by_tile = _tile_space()
    same, other = by_tile[4][:39], by_tile[8][0]
    ranked = same[:3] + [other] + same[3:]
    scores = {i: float(len(ranked) - k) for k, i in enumerate(ranked)}
    penalty = {i: 0.05 * 4 for i in same}
    assert diverse_top(scores, 4, space, knob_weight=0.0) == ranked[:4]
    assert diverse_top(scores, 4, space, knob_weight=0.0, penalty=penalty) == [other] + same[:3]


def test_annealing_starts_from_the_best_config_of_each_register_tile():
    """The three best measured configs share one register tile: only the best of them starts a chain, the
    other measured-config chains start from the best of other tiles."""
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, sa_chains=8)
    ranked = [i for i in MM_SPACE.sample(np.random.default_rng(3), 400)
              if toy_matmul_cost(MM, MM_SPACE.get(i)) is not None]
    by_tile: dict[tuple, list[int]] = {}
    for i in ranked:
        by_tile.setdefault(MM_SPACE.register_tile(i), []).append(i)
    crowded = next(v for v in by_tile.values() if len(v) >= 3)
    others = [v[0] for v in by_tile.values() if v is not crowded][:6]
    tuner._own = {i: float(100 - k) for k, i in enumerate(crowded[:3] + others)}
    assert tuner.model is not None  # fitted on those measurements: it scores the other chains' starts
    starts = tuner._starts()
    assert starts[:4] == [crowded[0]] + others[:3]
    assert len({MM_SPACE.register_tile(i) for i in starts[:4]}) == 4


def test_never_proposes_configs_that_break_gpu_limits():
    from autotune.gpu_limits import check_config
    from autotune.operators import default_template_ref
    from autotune.templates import resolve

    task = make_task("matmul", "M=512,N=512,K=512", target="cuda", arch="sm_90")
    ref = default_template_ref("matmul", "cuda")
    template = resolve(ref)
    space = template.define_space(task)
    tuner = _xgb(task, space, ref, seed=3, features="knob")
    proposed = []
    while len(proposed) < 48:
        batch = tuner.next_batch(min(16, 48 - len(proposed)))
        assert batch
        proposed += batch
        results = [MeasureResult((1e-3 * (1 + (i % 7)),), None, "", 0.0, 0.0) for i in batch]
        tuner.update([MeasureInput(task, space.get(i), ref) for i in batch], results)
    assert len(proposed) == 48
    assert all(check_config(task, template, space.get(i)) is None for i in proposed)


def test_cold_start_measures_a_small_random_batch_then_follows_the_model():
    from autotune.tuners.xgb import COLD_BATCH

    space = TOY_MATMUL.define_space(MM)
    tuner = _xgb(MM, space, TOY_MATMUL_REF, seed=0, features="knob")
    first = tuner.next_batch(16)
    assert len(first) == COLD_BATCH and tuner.model is None
    tuner.update(*_measure(MM, space, first))
    second = tuner.next_batch(16)
    assert len(second) == 16 and tuner.model is not None and not set(first) & set(second)


@pytest.mark.parametrize("seed", range(3))
def test_roofline_cold_start_picks_a_first_batch_the_prior_rates_higher(seed):
    from autotune.hardware import cpu_model
    from cost_models.features import extract
    from cost_models.prior import prior_scores

    batches = {rule: _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=seed, cold_start=rule).next_batch(16)
               for rule in COLD_STARTS}
    for batch in batches.values():
        assert len(batch) == len(set(batch)) == COLD_BATCH
        assert all(toy_matmul_cost(MM, MM_SPACE.get(i)) is not None for i in batch)
    prior = {rule: prior_scores(extract(MM, TOY_MATMUL, MM_SPACE, batch), cpu_model(MM.target))
             for rule, batch in batches.items()}
    assert np.median(prior["roofline"]) > np.median(prior["random"]), prior


def test_roofline_cold_start_only_where_the_prior_applies():
    assert _xgb(MM, MM_SPACE, TOY_MATMUL_REF).cold_start == "random"  # the default
    assert _xgb(MM, MM_SPACE, TOY_MATMUL_REF, cold_start="roofline").cold_start == "roofline"
    assert _xgb(MM, MM_SPACE, TOY_MATMUL_REF, features="knob", cold_start="roofline").cold_start == "random"
    cuda = make_task("matmul", "M=512,N=512,K=512", target="cuda", arch="sm_90")
    assert _xgb(cuda, MM_SPACE, TOY_MATMUL_REF, cold_start="roofline").cold_start == "random"
    with pytest.raises(ValueError, match="cold start"):
        _xgb(MM, MM_SPACE, TOY_MATMUL_REF, cold_start="analytic")
    with pytest.raises(ValueError, match="share"):
        _xgb(MM, MM_SPACE, TOY_MATMUL_REF, cold_start="roofline", cold_random=1.5)


def test_training_rows_weigh_own_records_by_the_transfer_halflife():
    from cost_models.dataset import Dataset

    own_X, own_y = np.ones((3, 2), np.float32), np.array([1.0, 2.0, 3.0])
    pool = Dataset(np.zeros((32, 2), np.float32), np.arange(32.0), np.repeat([0, 1], 16), ["a", "b"])
    X, y, groups, weights = training_rows(own_X, own_y, pool, halflife=16)
    assert X.shape == (35, 2) and list(y[:3]) == [1.0, 2.0, 3.0]
    assert list(groups[:3]) == [0, 0, 0] and set(groups[3:]) == {1, 2}  # transfer groups after the task's own
    assert list(weights[:3]) == [2.0] * 3 and (weights[3:] == 1.0).all()  # 32 transfer rows / half-life 16
    _, _, _, alone = training_rows(own_X, own_y, None, halflife=16)
    assert list(alone) == [1.0] * 3


def test_batches_try_the_incumbent_with_other_register_tiles():
    """A model-guided batch starts with `incumbent_moves` of the best measured config's inner moves, none
    measured before, at least `min_distance` knobs apart."""
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=1, features="knob", explore=0.0, incumbent_moves=2,
                     min_distance=2)
    seen = _tune(tuner, MM, MM_SPACE, 24, batch=8)
    best = max((i for i in seen if i in tuner._own), key=lambda i: tuner._own[i])
    batch = tuner.next_batch(8)
    assert set(batch[:2]) <= set(MM_SPACE.inner_moves(best)) - set(seen)
    assert sum(a != b for a, b in zip(MM_SPACE.digits(batch[0]), MM_SPACE.digits(batch[1]))) >= 2


def test_donor_configs_take_the_other_tasks_fastest_configs_in_turn_same_operator_nearest_first():
    from autotune.tuners.elites import donor_configs

    conv_space = TOY_CONV2D.define_space(TINY_CONV)
    other = _other_task_records(40)
    conv = [Record(MeasureInput(TINY_CONV, conv_space.get(i), TOY_CONV2D_REF), MeasureResult((1e-6,), None, "", 0, 0),
                   TOY_CONV2D.version, 1, {}) for i in conv_space.sample(np.random.default_rng(3), 20)]
    third = make_task("matmul", {"M": 64, "N": 256, "K": 128})
    space3 = TOY_MATMUL.define_space(third)
    more = [Record(i, r, TOY_MATMUL.version, 1, {})
            for i, r in zip(*_measure(third, space3, space3.sample(np.random.default_rng(4), 10)))]
    own = [Record(i, r, TOY_MATMUL.version, 1, {}) for i, r in zip(*_measure(MM, MM_SPACE, [0, 1]))]
    got = donor_configs(MM, MM_SPACE, conv + other + more + own)

    def ranked(records):  # the task's valid configs, fastest first, mapped onto MM's space
        ok = sorted((r for r in records if r.result.ok), key=lambda r: r.result.mean_s)
        return [MM_SPACE.nearest(r.input.config.knobs) for r in ok]

    a, b = ranked(other), ranked(more)
    assert got[:4] == [a[0], b[0], a[1], b[1]]  # the two matmul tasks in turn; the conv2d's knobs differ
    assert len(got) == len(a) + len(b)  # failed configs and the task's own records left out
    assert all(len(v) == 1 for v in got)  # same template: every value has its match
    near_third = make_task("matmul", {"M": 64, "N": 256, "K": 160})  # nearer `third` than OTHER_MM: its first
    space = TOY_MATMUL.define_space(near_third)
    fastest = min((r for r in more if r.result.ok), key=lambda r: r.result.mean_s)
    assert donor_configs(near_third, space, other + more)[0] == space.nearest(fastest.input.config.knobs)


def test_first_batch_starts_with_the_fastest_configs_of_other_tasks_mapped():
    from autotune.tuners.elites import donor_configs

    transfer = _other_task_records(160)
    elites = [v[0] for v in donor_configs(MM, MM_SPACE, transfer)]
    tuner = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, transfer=transfer, sa_chains=8, sa_steps=12)
    batch = tuner.next_batch(16)  # after the untuned config (`untuned_first`)
    assert batch[1:5] == [i for i in elites if toy_matmul_cost(MM, MM_SPACE.get(i)) is not None][:4]
    tuner.update(*_measure(MM, MM_SPACE, batch))
    second = tuner.next_batch(16)  # the task's own measurements guide it now: no more configs by example
    usable = [i for i in elites if toy_matmul_cost(MM, MM_SPACE.get(i)) is not None and i not in batch]
    assert not set(second) & set(batch) and second[:4] != usable[:4]
    off = _xgb(MM, MM_SPACE, TOY_MATMUL_REF, seed=0, transfer=transfer, sa_chains=8, sa_steps=12,
                   transfer_elites=0)
    assert off.next_batch(16)[:4] != batch[:4]


# Proposals of searches by the tuner as it was before its modules were split (knob features: 3 batches of 8;
# loop features and knob features with transfer: 2), pinned: the same seed must keep proposing the same configs
# (without the untuned config first, which came later).
PINNED = {
    ("knob", 1, False): [[304, 7240, 3703, 1261, 2248, 3579, 8314, 7199],
                         [3471, 3591, 3717, 3849, 2644, 3576, 3501, 2526],
                         [3489, 2529, 3495, 3502, 3503, 2517, 1820, 1294]],
    ("knob", 3, True): [[4234, 2311, 4376, 2512, 5111, 3275, 2302, 4364],
                        [3287, 3263, 2303, 3274, 3273, 3272, 4247, 4169]],
    ("loop", 0, False): [[5572, 2692, 2360, 658, 7114, 4405, 358, 1533],
                         [1641, 1545, 1123, 1307, 501, 1534, 1535, 3708]],
}


@pytest.mark.parametrize("features,seed,transfer", list(PINNED))
def test_the_same_seed_proposes_the_pinned_configs(features, seed, transfer):
    want = PINNED[features, seed, transfer]
    tuner = _xgb(seed=seed, features=features, transfer=_other_task_records(160) if transfer else (),
                 untuned_first=False)
    got = _tune(tuner, MM, MM_SPACE, 8 * len(want), batch=8)
    assert [got[k:k + 8] for k in range(0, len(got), 8)] == want


def test_the_first_batch_holds_the_untuned_config_once():
    from autotune.templates import heuristic_configs

    untuned = heuristic_configs(TOY_MATMUL, MM, count=1)[0].index
    for transfer in ((), _other_task_records(160)):
        tuner = _xgb(seed=1, transfer=transfer, sa_chains=8, sa_steps=12)
        first = tuner.next_batch(8)
        assert first[0] == untuned and first.count(untuned) == 1
        tuner.update(*_measure(MM, MM_SPACE, first))
        assert untuned not in tuner.next_batch(8)
        assert untuned not in _xgb(seed=1, transfer=transfer, untuned_first=False).next_batch(8)
    resumed = _xgb(seed=1)  # a resumed search that measured it already does not propose it again
    resumed.update(*_measure(MM, MM_SPACE, [untuned, 5]))
    assert untuned not in resumed.next_batch(8)


def test_make_tuner_checks_the_options_type_and_names_the_tuners():
    from autotune.errors import AutotuneError
    from autotune.tuners import learns_from_transfer, options_type
    from autotune.tuners.simple import GridTuner, RandomTuner

    assert options_type("xgb") is XGBOptions and options_type("random") is None and options_type("grid") is None
    assert learns_from_transfer("xgb") and not learns_from_transfer("random") and not learns_from_transfer("grid")
    assert isinstance(make_tuner("xgb", MM, MM_SPACE, TOY_MATMUL_REF), XGBTuner)  # None: the defaults
    with pytest.raises(AutotuneError, match="takes XGBOptions options, not dict"):
        make_tuner("xgb", MM, MM_SPACE, TOY_MATMUL_REF, options={"features": "knob"})
    with pytest.raises(AutotuneError, match="the random tuner takes no options"):
        make_tuner("random", MM, MM_SPACE, TOY_MATMUL_REF, options=XGBOptions())
    with pytest.raises(AutotuneError, match="unknown tuner 'sa'; choose one of: random, grid, xgb"):
        make_tuner("sa", MM, MM_SPACE, TOY_MATMUL_REF)
    records = _other_task_records(8)
    for name, cls in (("random", RandomTuner), ("grid", GridTuner)):  # transfer and cache: accepted and ignored
        tuner = make_tuner(name, MM, MM_SPACE, TOY_MATMUL_REF, seed=2, transfer=records, cache=object())
        tuner.add_transfer(records)
        assert tuner.next_batch(8) == cls(MM, MM_SPACE, TOY_MATMUL_REF, seed=2).next_batch(8)


@pytest.mark.parametrize("bad,match", [({"features": "pixels"}, "unknown feature kind 'pixels'"),
                                       ({"objective": "lambdamart"}, "unknown objective"),
                                       ({"model_kind": "forest"}, "unknown cost model kind 'forest'"),
                                       ({"explore": 1.5}, "explore is a share"),
                                       ({"transfer_explore": -0.1}, "transfer_explore is a share"),
                                       ({"sa_chains": 0}, "sa_chains must be at least 1"),
                                       ({"n_rounds": 0}, "n_rounds must be at least 1"),
                                       ({"transfer_halflife": 0}, "transfer_halflife must be above 0"),
                                       ({"batch_size": 0}, "batch_size must be at least 1")])
def test_options_are_checked_when_made(bad, match):
    from autotune.errors import AutotuneError

    with pytest.raises(AutotuneError, match=match) as err:
        XGBOptions(**bad)
    assert "\n" not in str(err.value)


def test_added_transfer_records_teach_as_those_given_at_construction():
    records = _other_task_records(160)
    third = make_task("matmul", {"M": 64, "N": 256, "K": 128})
    space3 = TOY_MATMUL.define_space(third)
    more = [Record(i, r, TOY_MATMUL.version, 1, {})
            for i, r in zip(*_measure(third, space3, space3.sample(np.random.default_rng(4), 40)))]
    options = {"features": "knob", "sa_chains": 8, "sa_steps": 8}
    whole = _xgb(seed=2, transfer=records + more, **options)
    added = _xgb(seed=2, transfer=records, **options)
    added.add_transfer(more)
    assert _tune(added, MM, MM_SPACE, 24, batch=8) == _tune(whole, MM, MM_SPACE, 24, batch=8)
    # after measurements: the model is fitted again, on the new records too; the task's own records teach nothing
    model = added.model
    added.add_transfer([Record(i, r, TOY_MATMUL.version, 1, {}) for i, r in zip(*_measure(MM, MM_SPACE, [1, 2]))])
    assert added.model is model
    fourth = make_task("matmul", {"M": 512, "N": 128, "K": 64})
    space4 = TOY_MATMUL.define_space(fourth)
    added.add_transfer([Record(i, r, TOY_MATMUL.version, 1, {})
                        for i, r in zip(*_measure(fourth, space4, space4.sample(np.random.default_rng(5), 20)))])
    assert added.model is not model and len(added._trainer.transfer()) > len(whole._trainer.transfer())


def test_a_least_squares_cost_model_ranks_the_task_after_a_search():
    """model_kind="linear": the tuner makes its models through the registry; the least-squares model fitted on a
    short search's measurements ranks configs it never saw."""
    from cost_models.linear import LinearCostModel

    for seed in range(2):
        tuner = _xgb(seed=seed, features="knob", model_kind="linear", sa_chains=8, sa_steps=8)
        _tune(tuner, MM, MM_SPACE, 32, batch=8)
        held = [i for i in MM_SPACE.sample(np.random.default_rng(100 + seed), 300)
                if toy_matmul_cost(MM, MM_SPACE.get(i)) is not None]
        speed = [-toy_matmul_cost(MM, MM_SPACE.get(i)) for i in held]
        assert isinstance(tuner.model, LinearCostModel)
        assert rank_correlation(tuner.model.predict(tuner._configs.rows(held)), speed) > 0.3


def test_command_line_arguments_give_the_tuners_typed_options():
    import argparse

    from autotune.cli_args import tuner_options, xgb_options
    from autotune.errors import AutotuneError

    args = argparse.Namespace(tuner="xgb", features="knob", cold_start="roofline", cost_model="m.json")
    assert xgb_options(args) == tuner_options(args) == XGBOptions(features="knob", cold_start="roofline",
                                                                  cost_model="m.json")
    assert tuner_options(argparse.Namespace(tuner="random", features="loop", cold_start="random")) is None
    with pytest.raises(AutotuneError, match="unknown tuner"):
        tuner_options(argparse.Namespace(tuner="anneal", features="loop", cold_start="random"))
