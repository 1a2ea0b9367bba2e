import math

import numpy as np
import pytest

from autotune.space import ConfigSpace, annotate_knob, choice_knob, reorder_knob, split_knob


def _space():
    return ConfigSpace((split_knob("i", 48, 3), reorder_knob("o", [(0, 1, 2), (2, 1, 0)]),
                        annotate_knob("a", ["none", "unroll", "vectorize"]), choice_knob("u", [0, 16, 64, 512])))


def test_split_factors_are_exact_and_power2_covers():
    k = split_knob("i", 48, 3)
    assert all(math.prod(c) == 48 for c in k.candidates)
    assert len(set(k.candidates)) == len(k.candidates) == 45  # 48 = 2^4 * 3 -> C(6,2) * C(3,1) = 15 * 3
    p2 = split_knob("j", 100, 2, policy="power2")
    assert all(c[0] * c[1] >= 100 and c[1] & (c[1] - 1) == 0 for c in p2.candidates)
    assert all(math.prod(c[1:]) <= 8 for c in split_knob("k", 64, 3, max_inner=8).candidates)
    assert {c[-1] for c in split_knob("v", 64, 2, inner_candidates=[16, 32]).candidates} == {16, 32}


def test_index_round_trip_mixed_radix():
    s = _space()
    assert len(s) == 45 * 2 * 3 * 4
    for i in [0, 1, 17, len(s) - 1]:
        cfg = s.get(i)
        assert s.index_of(s.digits(i)) == i == cfg.index == s.index_of_values(cfg.knobs)
        assert cfg["i"] in s["i"].candidates
    assert s.get(1)["u"] == 16  # the last knob varies fastest
    with pytest.raises(IndexError):
        s.get(len(s))


def test_sample_and_neighbour():
    s = _space()
    rng = np.random.default_rng(0)
    got = s.sample(rng, 50, exclude={0, 1, 2})
    assert len(got) == len(set(got)) == 50 and not {0, 1, 2} & set(got)
    assert len(s.sample(rng, 10_000)) == len(s)  # never more than the space holds
    for i in got[:20]:
        j = s.neighbour(i, rng)
        assert sum(a != b for a, b in zip(s.digits(i), s.digits(j))) == 1


def test_knob_features_fixed_length():
    s = _space()
    assert len({len(s.knob_features(i)) for i in range(0, len(s), 37)}) == 1


def test_inner_moves_change_one_innermost_factor_and_keep_the_rest():
    s = ConfigSpace((split_knob("i", 64, 3), split_knob("k", 16, 2), choice_knob("u", [0, 16])))
    here = s.index_of_values({"i": (4, 8, 2), "k": (4, 4), "u": 16})
    moves = s.inner_moves(here)
    by_knob = {"i": [], "k": []}
    for m in moves:
        changed = [k.name for k, a, b in zip(s.knobs, s.digits(here), s.digits(m)) if a != b]
        assert len(changed) == 1 and changed[0] in by_knob  # one split knob, never the choice knob
        by_knob[changed[0]].append(s.get(m)[changed[0]])
    # every other innermost factor once, the outermost factor kept while it can be, the middle one making
    # up the extent
    assert by_knob["i"] == [(4, 16, 1), (4, 4, 4), (4, 2, 8), (4, 1, 16), (2, 1, 32), (1, 1, 64)]
    assert sorted(c[-1] for c in by_knob["k"]) == [1, 2, 8, 16]
    # where the outermost cannot stay (all 64 left for the middle and inner), the nearest factors
    top = s.index_of_values({"i": (1, 1, 64), "k": (1, 16), "u": 0})
    assert (1, 2, 32) in [s.get(m)["i"] for m in s.inner_moves(top)]


def test_register_tile_is_the_innermost_factors_of_the_register_knobs():
    knobs = (split_knob("x", 56, 3), split_knob("y", 56, 2), split_knob("k", 64, 3))
    i = ConfigSpace(knobs).index_of_values({"x": (2, 4, 7), "y": (4, 14), "k": (1, 2, 32)})
    assert ConfigSpace(knobs).register_tile(i) == (7, 14, 32)  # no `register`: every split knob
    s = ConfigSpace(knobs, register=("x", "k"))
    assert s.register_tile(i) == (7, 32)
    assert s.coverage(i)[-3:] == [7, 14, 32]  # a batch still covers every innermost factor
    with pytest.raises(ValueError, match="not split knobs"):
        ConfigSpace((*knobs, choice_knob("u", [0, 16])), register=("x", "u"))


def test_a_register_tile_limit_keeps_indices_and_is_never_proposed():
    knobs = (split_knob("i", 64, 3), split_knob("j", 64, 2), choice_knob("u", [0, 16, 64]))
    free, limited = ConfigSpace(knobs, register=("i", "j")), ConfigSpace(knobs, register=("i", "j"),
                                                                      max_register_tile=64)
    assert len(limited) == len(free) and limited.get(123).knobs == free.get(123).knobs  # same indices, same configs
    allowed = [i for i in range(len(limited)) if math.prod(limited.register_tile(i)) <= 64]
    assert 0 < len(allowed) < len(limited)
    assert limited.allowed_count() == len(allowed) and free.allowed_count() == len(free)
    assert all(limited.allows(i) for i in allowed) and all(free.allows(i) for i in range(len(free)))
    rng = np.random.default_rng(0)
    got = limited.sample(rng, 200)
    assert len(got) == 200 and all(math.prod(limited.register_tile(i)) <= 64 for i in got)
    assert sorted(limited.sample(rng, 10 ** 6)) == allowed  # a small space: every allowed config, no other
    for i in got[:30]:
        assert limited.allows(limited.neighbour(i, rng))
        assert all(limited.allows(m) for m in limited.inner_moves(i))
    over = limited.index_of_values({"i": (1, 1, 64), "j": (1, 64), "u": 0})
    assert not limited.allows(over) and limited.get(over)["i"] == (1, 1, 64)  # a log's record keeps its meaning
    assert "within the register tile limit 64" in limited.describe()


def test_model_free_tuners_propose_only_allowed_configs():
    from autotune.tuners.simple import GridTuner, RandomTuner

    space = ConfigSpace((split_knob("i", 32, 2), split_knob("j", 32, 2)), max_register_tile=32)
    for tuner in (GridTuner(None, space, "t"), RandomTuner(None, space, "t", seed=1)):
        seen = [i for _ in range(20) for i in tuner.next_batch(8)]
        assert len(seen) == len(set(seen)) == space.allowed_count()  # all of them, once, then nothing
        assert all(space.allows(i) for i in seen)


def test_nearest_maps_another_shapes_config_onto_this_space():
    """Values this space has are kept, splits it lacks become the closest (innermost factor first), a choice it lacks
    becomes its equivalents here, else any candidate."""
    s = ConfigSpace((split_knob("i", 48, 3), choice_knob("pack", ("none", "root", "tile")), choice_knob("u", (0, 16))),
                    equivalents={"pack": {"pre": ("root", "tile")}})
    [same] = s.nearest({"i": (2, 3, 8), "pack": "none", "u": 16})
    assert s.get(same).knobs == {"i": (2, 3, 8), "pack": "none", "u": 16}
    [closest] = s.nearest({"i": (4, 4, 8), "pack": "tile", "u": 0})  # 128 rows: the register tile's 8 is kept
    assert s.get(closest)["i"][-1] == 8 and s.get(closest)["i"][1] == 3  # then the middle factor nearest 4
    assert [s.get(i)["pack"] for i in s.nearest({"i": (1, 6, 8), "pack": "pre", "u": 0})] == ["root", "tile"]
    assert [s.get(i)["u"] for i in s.nearest({"i": (1, 6, 8), "pack": "none", "u": 64})] == [0, 16]
    assert [s.get(i)["i"] for i in s.nearest({"pack": "none", "u": 0})] == [s.knobs[0].candidates[0]]
