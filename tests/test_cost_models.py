"""Features, the XGBoost cost model and training from records (no builds, no GPU)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from autotune.hardware import CpuModel
from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.records import Record
from autotune.task import make_task
from autotune.templates import Template
from cost_models import (
    COST_MODELS,
    LOOP_DIM,
    FeatureCache,
    LinearCostModel,
    XGBCostModel,
    cost_model_class,
    extract,
    feature_dim,
    rank_correlation,
    records_dataset,
    relative_throughput,
    train_from_records,
    valid_rows,
)
from cost_models.prior import prior_scores, roofline_cycles
from tests.toy_template import TOY_CONV2D, TOY_MATMUL, TOY_MATMUL_REF, _matmul_apply, _matmul_space, toy_matmul_cost

MM = make_task("matmul", {"M": 256, "N": 256, "K": 256})
MM2 = make_task("matmul", {"M": 64, "N": 512, "K": 128})
CONV = make_task("conv2d", {"C": 16, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "padding": 1})


def _valid_indices(task, template, n: int, seed: int = 0) -> list[int]:
    space = template.define_space(task)
    return space.sample(np.random.default_rng(seed), n)


def _record(task, index: int, ref: str = TOY_MATMUL_REF, template=TOY_MATMUL) -> Record:
    cfg = template.define_space(task).get(index)
    cost = toy_matmul_cost(task, cfg)
    res = (MeasureResult((cost,), None, "", 0.0, 0.0) if cost is not None
           else MeasureResult(None, ErrorKind.INVALID_CONFIG, "too wide", 0.0, 0.0))
    return Record(MeasureInput(task, cfg, ref), res, template.version, 1, {})


# ---- features ----------------------------------------------------------------------------

@pytest.mark.parametrize("task,template", [(MM, TOY_MATMUL), (MM2, TOY_MATMUL), (CONV, TOY_CONV2D)])
def test_loop_features_have_one_length_for_every_task_and_operator(task, template):
    space = template.define_space(task)
    X = extract(task, template, space, _valid_indices(task, template, 12), "loop", FeatureCache())
    assert X.shape == (12, LOOP_DIM) == (12, feature_dim("loop"))
    assert X.dtype == np.float32
    ok = valid_rows(X)
    assert ok.sum() >= 6 and np.isfinite(X[ok]).all()
    assert len({tuple(r) for r in X[ok]}) > 1  # different configs look different


def _without_weight_copy(mod):
    """`mod` (a kernel, `Template.kernel`) less the emptied loop nest of its PREPACK copy: the kernel as run."""
    import tvm
    from tvm import s_tir, tirx

    from autotune.templates import PREPACK

    def is_copy(stmt):
        while isinstance(stmt, tirx.For):
            stmt = stmt.body
        return isinstance(stmt, s_tir.SBlockRealize) and PREPACK in stmt.block.annotations

    func = mod["main"]
    root = func.body.block
    kept = [st for st in root.body.seq if not is_copy(st)]
    assert len(kept) == len(root.body.seq) - 1
    body = kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
    block = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                         list(root.alloc_buffers), root.match_buffers, root.annotations)
    return tvm.IRModule({"main": func.with_body(s_tir.SBlockRealize(func.body.iter_values, func.body.predicate,
                                                                    block))})


@pytest.mark.parametrize("op,shape", [("conv2d", "C=64,H=28,W=28,K=64,R=3,S=3,padding=1"),
                                      ("depthwise_conv2d", "C=96,H=28,W=28,R=3,S=3,padding=1")])
def test_loop_features_leave_out_the_weight_copy_of_a_packed_kernel(op, shape):
    """A config whose kernel takes its weight packed ahead is featured as that kernel: the copy in its schedule
    (a PREPACK block, run once per model) changes no feature (PerStoreFeature drops layout-rewrite blocks)."""
    import tvm

    from autotune.templates import default_template
    from cost_models.features import loop_rows

    task = make_task(op, shape)
    template = default_template(task)
    space = template.define_space(task)
    packed = [space.get(i) for i in space.sample(np.random.default_rng(0), 200)
              if template.relayouts(task, space.get(i))][:6]
    as_run = dataclasses.replace(
        template, apply=lambda t, cfg: tvm.s_tir.Schedule(_without_weight_copy(template.kernel(t, cfg))))
    got, want = np.stack(loop_rows(task, template, packed)), np.stack(loop_rows(task, as_run, packed))
    assert valid_rows(want).sum() >= 2  # (illegal configs: NaN rows in both)
    np.testing.assert_array_equal(got, want)


def test_illegal_config_gets_a_nan_row():
    space = TOY_MATMUL.define_space(MM)
    illegal = next(i for i in range(len(space)) if toy_matmul_cost(MM, space.get(i)) is None)
    legal = next(i for i in range(len(space)) if toy_matmul_cost(MM, space.get(i)) is not None)
    X = extract(MM, TOY_MATMUL, space, [illegal, legal], "loop", FeatureCache())
    assert valid_rows(X).tolist() == [False, True]


def test_knob_features_match_the_space():
    space = TOY_MATMUL.define_space(MM)
    X = extract(MM, TOY_MATMUL, space, [0, 5, 7], "knob", FeatureCache())
    assert X.shape == (3, feature_dim("knob", space))
    np.testing.assert_array_equal(X[1], np.asarray(space.knob_features(5), dtype=np.float32))


def test_cache_makes_repeated_extraction_free():
    calls: list[int] = []

    def counting_apply(task, cfg):
        calls.append(1)
        return _matmul_apply(task, cfg)

    template = Template("tests.counting_matmul", "matmul", "llvm", _matmul_space, counting_apply)
    assert template.version  # fingerprinting applies a few probe configs once: not counted below
    calls.clear()
    space = template.define_space(MM)
    cache = FeatureCache()
    idx = _valid_indices(MM, template, 8)
    first = extract(MM, template, space, idx, "loop", cache)
    assert len(calls) == 8 and len(cache) == 8
    again = extract(MM, template, space, idx[::-1] + idx[:2], "loop", cache)
    assert len(calls) == 8  # nothing recomputed
    np.testing.assert_array_equal(again[: len(idx)], first[::-1])
    extract(MM2, template, template.define_space(MM2), idx[:3], "loop", cache)
    assert len(calls) == 11  # another task has its own rows


def test_bounded_cache_evicts_oldest_rows():
    cache = FeatureCache(max_rows_per_key=4)
    space = TOY_MATMUL.define_space(MM)
    X = extract(MM, TOY_MATMUL, space, list(range(6)), "knob", cache)
    assert len(cache) == 4 and X.shape[0] == 6


# ---- model ------------------------------------------------------------------------------

def _synthetic(n: int, n_groups: int, seed: int):
    """Rows whose throughput is a known function of the features; each group has its own speed scale."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 12)).astype(np.float32)
    groups = rng.integers(0, n_groups, n)
    cost = np.exp(2 * X[:, 0] - 1.5 * X[:, 1] + X[:, 2] * X[:, 3]) * (1 + 3 * groups)
    return X, 1.0 / cost, groups


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_model_ranks_configs_of_unseen_groups(objective):
    X, y, g = _synthetic(600, 4, seed=0)
    Xt, yt, gt = _synthetic(300, 2, seed=1)
    model = XGBCostModel(objective=objective, seed=0).fit(X, y, g)
    pred = model.predict(Xt)
    for k in range(2):
        assert rank_correlation(pred[gt == k], yt[gt == k]) > 0.8


def test_model_save_load_round_trip(tmp_path):
    X, y, g = _synthetic(300, 3, seed=2)
    model = XGBCostModel(objective="rank", n_rounds=20, seed=3).fit(X, y, g)
    path = tmp_path / "model.json"
    model.save(path)
    loaded = XGBCostModel.load(path)
    assert loaded.get_params() == model.get_params()
    assert loaded.n_features_in_ == 12 and loaded.n_samples_ == 300
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_model_files_of_version_5_load_as_one_booster(tmp_path):
    X, y, g = _synthetic(200, 2, seed=3)
    model = XGBCostModel(n_rounds=10).fit(X, y, g)
    model.save(tmp_path / "m.json")
    doc = json.loads((tmp_path / "m.json").read_text())
    del doc["params"]["bag"]
    doc.update(version=5, booster=doc.pop("boosters")[0])  # a single-booster file of format version 5
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = XGBCostModel.load(tmp_path / "old.json")
    assert old.bag == 1
    np.testing.assert_array_equal(old.predict(X), model.predict(X))
    doc["version"] = 4
    (tmp_path / "older.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="retrain it with autotune train-model"):
        XGBCostModel.load(tmp_path / "older.json")


def test_model_fit_is_deterministic_and_skips_nan_rows():
    X, y, g = _synthetic(200, 2, seed=4)
    X[:5] = np.nan
    a = XGBCostModel(seed=7, n_rounds=15).fit(X, y, g)
    b = XGBCostModel(seed=7, n_rounds=15).fit(X, y, g)
    np.testing.assert_array_equal(a.predict(X[5:]), b.predict(X[5:]))
    assert a.n_samples_ == 195
    assert np.isneginf(a.predict(X[:5])).all()


def test_continued_fit_keeps_the_initial_trees():
    X, y, g = _synthetic(200, 2, seed=5)
    base = XGBCostModel(n_rounds=10).fit(X, y, g)
    more = XGBCostModel(n_rounds=5).fit(X[:50], y[:50], g[:50], init_model=base)
    assert [b.num_boosted_rounds() for b in more.boosters_] == [15]
    two = XGBCostModel(n_rounds=5, bag=2).fit(X[:50], y[:50], g[:50], init_model=XGBCostModel(n_rounds=3).fit(X, y, g))
    assert [b.num_boosted_rounds() for b in two.boosters_] == [8, 8]


def test_bag_scores_by_the_mean_of_its_boosters():
    X, y, g = _synthetic(300, 3, seed=6)
    sub = dict(n_rounds=20, subsample=0.8, colsample_bytree=0.8)
    bag = XGBCostModel(bag=3, seed=2, **sub).fit(X, y, g)
    members = [XGBCostModel(seed=2 + m, **sub).fit(X, y, g).predict(X) for m in range(3)]
    np.testing.assert_allclose(bag.predict(X), np.mean(members, axis=0), rtol=1e-6)
    assert len({tuple(p[:10]) for p in members}) == 3  # each booster drew its own rows and columns
    with pytest.raises(ValueError, match="bag must be at least 1"):
        XGBCostModel(bag=0)


def test_relative_throughput_is_per_group():
    y = np.array([1.0, 2.0, 0.0, 10.0, 5.0])
    g = np.array([0, 0, 0, 1, 1])
    np.testing.assert_allclose(relative_throughput(y, g), [0.5, 1.0, 0.0, 1.0, 0.5])


def _linear(n: int, n_groups: int, seed: int):
    """Rows whose cost is log-linear in the features (a least-squares fit can rank them); a speed scale per group."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 12)).astype(np.float32)
    groups = rng.integers(0, n_groups, n)
    cost = np.exp(1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 2]) * (1 + 3 * groups)
    return X, 1.0 / cost, groups


def test_linear_model_ranks_configs_of_unseen_groups_and_skips_nan_rows():
    X, y, g = _linear(400, 4, seed=0)
    X[:5] = np.nan
    Xt, yt, gt = _linear(200, 2, seed=1)
    model = LinearCostModel(features="knob").fit(X, y, g)
    pred = model.predict(Xt)
    for k in range(2):
        assert rank_correlation(pred[gt == k], yt[gt == k]) > 0.8
    assert np.isneginf(model.predict(X[:5])).all() and np.isfinite(model.predict(X[5:])).all()
    with pytest.raises(ValueError, match="finite features"):
        LinearCostModel().fit(X[:5], y[:5], g[:5])


def test_linear_model_save_load_round_trip_and_continued_fit(tmp_path):
    X, y, g = _linear(300, 3, seed=2)
    base = LinearCostModel(features="knob", ridge=0.5).fit(X, y, g)
    base.save(tmp_path / "linear.json")
    loaded = LinearCostModel.load(tmp_path / "linear.json")
    assert loaded.get_params() == base.get_params() and loaded.features == "knob"
    np.testing.assert_array_equal(loaded.predict(X), base.predict(X))
    # continuing on the same rows adds a correction of the base model's residual: no worse a fit than the base
    more = LinearCostModel(ridge=0.5).fit(X, y, g, init_model=base)
    target = relative_throughput(y, g)
    assert np.mean((more.predict(X) - target) ** 2) <= np.mean((base.predict(X) - target) ** 2) + 1e-12
    with pytest.raises(ValueError, match="not a linear cost model"):
        LinearCostModel.load(_saved_xgb(tmp_path))


def test_an_interrupted_save_leaves_the_previous_model_file_whole(tmp_path, monkeypatch):
    X, y, g = _linear(100, 2, seed=3)
    path = tmp_path / "linear.json"
    LinearCostModel().fit(X, y, g).save(path)
    before = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", disk_full)
    with pytest.raises(OSError, match="No space left"):
        LinearCostModel(ridge=2.0).fit(X, y, g).save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["linear.json"]


def _saved_xgb(tmp_path):
    X, y, g = _synthetic(100, 2, seed=8)
    XGBCostModel(n_rounds=3).fit(X, y, g).save(tmp_path / "xgb.json")
    return tmp_path / "xgb.json"


def test_cost_models_by_kind():
    from autotune.errors import AutotuneError

    assert cost_model_class("xgb") is XGBCostModel and cost_model_class("linear") is LinearCostModel
    assert set(COST_MODELS) == {"xgb", "linear"}
    with pytest.raises(AutotuneError, match="xgb, linear"):
        cost_model_class("forest")
    for kind in COST_MODELS.values():  # each kind makes a search's model of the given features
        model = kind.for_tuning("knob", "rank", 7, 3)
        assert model.features == "knob"
    bag = XGBCostModel(bag=2, subsample=0.8, features="loop")
    like = XGBCostModel.for_tuning("loop", "reg", 7, 3, like=bag)
    assert (like.bag, like.subsample, like.objective, like.n_rounds, like.seed) == (2, 0.8, "reg", 7, 3)


# ---- training from records --------------------------------------------------------------

def test_train_from_records_of_two_tasks(tmp_path):
    recs = [_record(t, i) for t in (MM, MM2) for i in _valid_indices(t, TOY_MATMUL, 40, seed=1)]
    data = records_dataset(recs, "loop", cache=FeatureCache())
    assert data.X.shape[1] == LOOP_DIM and set(data.groups.tolist()) == {0, 1}
    assert len(data) < len(recs)  # illegal configs have no features
    model = train_from_records(recs, features="loop", n_rounds=20)
    assert model.features == "loop" and model.n_features_in_ == LOOP_DIM
    model.save(tmp_path / "m.json")
    assert XGBCostModel.load(tmp_path / "m.json").features == "loop"


def test_records_of_another_template_version_are_skipped():
    rec = _record(MM, 3)
    stale = Record(rec.input, rec.result, "0123456789ab", 1, {})
    with pytest.warns(UserWarning, match="other versions"):
        data = records_dataset([stale], "knob", cache=FeatureCache())
    assert len(data) == 0


@pytest.mark.slow  # two worker processes importing TVM
def test_worker_processes_compute_the_same_features():
    from cost_models.feature_pool import FeaturePool

    space = TOY_MATMUL.define_space(MM)
    idx = _valid_indices(MM, TOY_MATMUL, 10, seed=3)
    here = extract(MM, TOY_MATMUL, space, idx, "loop", FeatureCache())
    with FeaturePool(workers=2, min_batch=2) as pool:
        assert pool.ready(wait=True)
        there = extract(MM, TOY_MATMUL, space, idx, "loop", FeatureCache(), pool)
        assert not pool.closed
    np.testing.assert_array_equal(here, there)


@pytest.mark.slow  # two worker processes importing TVM
def test_a_template_the_workers_cannot_receive_falls_back_to_this_process_with_a_warning():
    from cost_models.feature_pool import FeaturePool

    local = Template("tests.local_matmul", "matmul", "llvm", lambda task: _matmul_space(task),
                     lambda task, cfg: _matmul_apply(task, cfg))  # lambdas: not picklable by reference
    space = local.define_space(MM)
    idx = _valid_indices(MM, local, 10, seed=3)
    here = extract(MM, TOY_MATMUL, space, idx, "loop", FeatureCache())
    with FeaturePool(workers=2, min_batch=2) as pool:
        assert pool.ready(wait=True)
        with pytest.warns(UserWarning, match="feature worker processes failed"):
            there = extract(MM, local, space, idx, "loop", FeatureCache(), pool)
        assert pool.closed
    np.testing.assert_array_equal(here, there)


PRIOR_CPU = CpuModel("test", lanes=16, vector_registers=32, cores=2, ghz=3.0, l1d_bytes=32 << 10,
                     l2_bytes=1 << 20, l3_bytes=32 << 20)


def test_roofline_prior_rates_vector_lanes_and_busy_cores():
    space = TOY_MATMUL.define_space(MM)
    tiles = dict(tile_i=(16, 16), tile_j=(16, 16), tile_k=(64, 4), unroll=0)
    kinds = [("none", "none"), ("none", "inner"), ("outer", "none"), ("outer", "inner")]
    indices = [space.index_of_values(dict(**tiles, parallel=p, vectorize=v)) for p, v in kinds]
    indices.append(space.index_of_values({**tiles, "tile_j": (2, 128), "parallel": "outer", "vectorize": "inner"}))
    cycles = roofline_cycles(extract(MM, TOY_MATMUL, space, indices, "loop", FeatureCache()), PRIOR_CPU)
    serial, vector, parallel, both, rejected = cycles
    # 16 lanes make it >8x faster (then the register loads bound it), the parallel loop keeps both cores busy
    assert vector < serial / 8 and both == pytest.approx(vector / 2)
    assert parallel == pytest.approx(serial / 2)
    assert rejected == np.inf
    scores = prior_scores(extract(MM, TOY_MATMUL, space, indices, "loop", FeatureCache()), PRIOR_CPU)
    assert list(np.argsort(-scores)) == [3, 1, 2, 0, 4]


def test_roofline_prior_charges_traffic_that_misses_the_caches():
    # all 256 rows of C under one k: a 256x64 strip of C (64 KiB) streams through L1 for every k
    space = TOY_MATMUL.define_space(MM)
    knobs = dict(tile_j=(4, 64), parallel="outer", vectorize="inner", unroll=0)
    blocked = space.index_of_values({**knobs, "tile_i": (16, 16), "tile_j": (16, 16), "tile_k": (64, 4)})
    streaming = space.index_of_values({**knobs, "tile_i": (2, 128), "tile_k": (256, 1)})
    X = extract(MM, TOY_MATMUL, space, [blocked, streaming], "loop", FeatureCache())
    cycles = roofline_cycles(X, PRIOR_CPU)
    assert cycles[1] > 2 * cycles[0]
    # with a 32 KiB L2 the strip comes from L3, at half the rate: the streaming config loses most
    slower = roofline_cycles(X, dataclasses.replace(PRIOR_CPU, l2_bytes=32 << 10)) / cycles
    assert slower[1] > 1.5 and slower[1] > slower[0]


def test_roofline_prior_caps_the_cost_of_spilled_accumulators():
    """Accumulators beyond the register file cost up to a load and a store per FMA, not more the more there are."""
    from cost_models.features import POOLED_DIM
    from cost_models.loop_levels import REGISTER_AT
    from cost_models.prior import SPILL_MAX

    space = TOY_MATMUL.define_space(MM)
    index = space.index_of_values(dict(tile_i=(16, 16), tile_j=(16, 16), tile_k=(64, 4), unroll=0,
                                       parallel="outer", vectorize="inner"))
    row = extract(MM, TOY_MATMUL, space, [index], "loop", FeatureCache())[0]
    regs = PRIOR_CPU.vector_registers * PRIOR_CPU.lanes * 4  # bytes of the vector register file
    rows = np.repeat(row[None], 3, axis=0)
    for r, acc_bytes in enumerate((regs // 8, 2 * regs, 64 * regs)):
        rows[r, POOLED_DIM + REGISTER_AT] = np.log2(acc_bytes)
    fits, spills, spills_more = roofline_cycles(rows, PRIOR_CPU)
    assert fits < spills < spills_more  # twice the register file: 2 / 0.85 = 2.35x the issue time
    assert spills_more == pytest.approx(spills * SPILL_MAX / (2 / 0.85))  # 64 times: capped at 4x, not 75x
