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
