"""Per-loop-level features: values on a hand-checked schedule (levels, reuse curve, register tile), and loop
orders PerStoreFeature cannot tell apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.fingerprint import PROBE_TARGETS
from autotune.operators import default_template_refs, get_op
from autotune.task import make_task
from autotune.templates import resolve
from cost_models.features import POOLED_DIM, FeatureCache, extract
from cost_models.loop_levels import (
    CURVE_AT,
    CURVE_CAPACITIES,
    LEVEL_DIM,
    N_KINDS,
    N_LOOPS_AT,
    PER_LEVEL,
    REGISTER_AT,
    level_features,
)
from search_spaces.conv2d import CONV2D_CPU
from search_spaces.matmul import MATMUL, apply_gemm


def _level(vec: np.ndarray, lvl: int) -> np.ndarray:
    return vec[lvl * PER_LEVEL:(lvl + 1) * PER_LEVEL]


def test_matmul_levels_match_hand_computed_footprints_and_strides():
    task = make_task("matmul", {"M": 64, "N": 64, "K": 64})
    cfg = {"tile_i": (4, 4, 4), "tile_j": (1, 2, 32), "tile_k": (4, 16), "mid_order": "ij", "pack_b": "none",
           "auto_unroll": 0}
    vec = level_features(apply_gemm(MATMUL, task, cfg).mod["main"])
    assert vec.shape == (LEVEL_DIM,)
    # Loops of the update block, innermost first (extent-1 loops dropped): j2 32 (vectorised), i2 4 (unrolled),
    # k1 16, j1 2, i1 4, k0 4, fused i0 x j0 4 (parallel).
    extents = [2 ** _level(vec, lvl)[0] for lvl in range(7)]
    assert np.allclose(extents, [32, 4, 16, 2, 4, 4, 4])
    kinds = [int(np.argmax(_level(vec, lvl)[1:1 + N_KINDS])) for lvl in range(7)]
    assert kinds == [2, 3, 0, 0, 0, 0, 1]  # vectorized, unrolled, serial..., parallel
    buf = 1 + N_KINDS  # written accumulator, then reads by size: A and B are both 64x64 floats
    inner = _level(vec, 0)
    assert inner[buf] == np.float32(math.log2(1 + 32 * 4))  # 32 accumulator floats
    assert inner[buf + 1] == np.float32(1.0)  # stride 1 along j
    k1 = _level(vec, 2)  # loops j2, i2, k1: accumulator 4x32, A 4x16, B 16x32
    assert k1[buf] == np.float32(math.log2(1 + 4 * 32 * 4))
    assert k1[buf + 1] == np.float32(0.0)  # k does not move the accumulator: reuse
    assert sorted([k1[buf + 2], k1[buf + 4]]) == sorted([np.float32(math.log2(1 + 4 * 16 * 4)),
                                                         np.float32(math.log2(1 + 16 * 32 * 4))])
    assert _level(vec, 2)[-1] == np.float32(math.log2(1 + (4 * 32 + 4 * 16 + 16 * 32) * 4))  # working set
    assert vec[N_LOOPS_AT] == 7
    # Reuse curve: working sets from the innermost loop outward are 260, 656, 2816, 5376, 9216, 24576 bytes
    # for 32, 128, 2048, 4096, 16384, 65536 iterations of 262144; each capacity takes the outermost that fits.
    curve = vec[CURVE_AT:REGISTER_AT].reshape(len(CURVE_CAPACITIES), 2)
    fits = {4096: (2816, 2048), 8192: (5376, 4096), 16384: (9216, 16384), 32768: (24576, 65536)}
    for capacity, (size, iters) in fits.items():
        per_iter, runs = curve[CURVE_CAPACITIES.index(capacity)]
        assert per_iter == np.float32(math.log2(size / iters))
        assert runs == np.float32(math.log2(262144 / iters))
    # Register tile j2 x i2 (vectorised, unrolled): 4x32 accumulators, 4 + 32 floats read per 128 iterations,
    # reused over k1 (16; j1 moves the accumulator), whose step reads A 4x16 and B 16x32.
    expected = [math.log2(4 * 32 * 4), math.log2(1 + (4 + 32) * 4 / 128), math.log2(128), math.log2(16),
                math.log2(1 + (4 * 16 + 16 * 32) * 4)]
    np.testing.assert_array_equal(vec[REGISTER_AT:], np.float32(expected))


def test_reduction_inside_or_outside_the_mid_tile_is_visible():
    """Two conv2d configs differing only in where the channel loop runs get identical PerStoreFeature rows
    but differ in the per-level part (the weight slice per register tile is 256x larger)."""
    task = make_task("conv2d", {"C": 256, "H": 14, "W": 14, "K": 256, "R": 3, "S": 3, "padding": 1})
    space = CONV2D_CPU.define_space(task)
    knobs = {"auto_unroll": 16, "pad": "root", "reduction_order": "r_s_c1", "tile_c": (256, 1),
             "tile_k": (2, 8, 16), "tile_x": (7, 2, 1), "tile_y": (7, 2), "vec_axis": "k"}
    idx = [space.index_of_values({**knobs, "c0_outer": outer}) for outer in (True, False)]
    X = extract(task, CONV2D_CPU, space, idx, "loop", FeatureCache())
    assert np.array_equal(X[0, :POOLED_DIM], X[1, :POOLED_DIM])
    assert not np.array_equal(X[0, POOLED_DIM:], X[1, POOLED_DIM:])


def test_a_double_buffered_k_loop_is_told_apart_from_a_plain_one():
    """A CUDA matmul config and its double-buffered twin: the pipelined k0 loop has 2 (stages) in its serial
    slot, the rest of the row is the same (the tuner skips a config whose row equals a proposed one's)."""
    task = make_task("matmul", {"M": 1024, "N": 1024, "K": 1024}, target="cuda", arch="sm_90")
    template = resolve(default_template_refs()[("matmul", "cuda")])
    space = template.define_space(task)
    knobs = {"tile_i": (8, 2, 16, 4), "tile_j": (8, 2, 16, 4), "tile_k": (32, 4, 8), "fetch_vec": 4,
             "auto_unroll": 512, "unroll_explicit": True}
    idx = [space.index_of_values({**knobs, "double_buffer": db}) for db in (False, True)]
    X = extract(task, template, space, idx, "loop", FeatureCache())
    plain, double = X[:, POOLED_DIM:]
    # levels innermost first (extent > 1): j3 4, i3 4, k2 8, k1 4, k0 32
    k0 = _level(plain, 4)
    assert 2 ** k0[0] == 32
    serial = 1  # slot of ForKind serial in a level
    assert k0[serial] == 1.0 and _level(double, 4)[serial] == 2.0
    diff = np.flatnonzero(X[0] != X[1])
    assert diff.tolist() == [POOLED_DIM + 4 * PER_LEVEL + serial]


@pytest.mark.parametrize("op,kind", sorted(default_template_refs()))
def test_every_template_gives_level_features(op, kind):
    """The extractor understands every template's IR (features.py would silently fall back to zeros)."""
    template = resolve(default_template_refs()[(op, kind)])
    task = make_task(op, get_op(op).probe_shapes[0], target=PROBE_TARGETS[kind][0])
    space = template.define_space(task)
    done = 0
    for index in space.sample(np.random.default_rng(0), 12):
        try:
            sch = template.apply(task, space.get(index))
        except Exception:  # noqa: BLE001, S112 - an illegal config
            continue
        vec = level_features(sch.mod["main"])
        assert vec[N_LOOPS_AT] >= 2 and np.isfinite(vec).all() and vec[:PER_LEVEL].any()
        done += 1
    assert done >= 3


def test_eval_index_evaluates_an_affine_map_on_ints_and_on_numpy_index_arrays():
    """The same evaluator gives access strides (ints) and applies a layout map to whole index grids (arrays)."""
    from tvm import tirx

    from cost_models.loop_levels import eval_index

    i, j, b = tirx.Var("i", "int32"), tirx.Var("j", "int32"), tirx.Var("b", "int32")
    expr = tirx.floordiv(j, 16) * 100 + b * 16 + tirx.floormod(j, 16) - 1
    assert eval_index(expr, {b: i + 1}, {i: 2, j: 35}) == 2 * 100 + 3 * 16 + 3 - 1
    I, J = np.meshgrid(np.arange(3), np.arange(40), indexing="ij")
    got = eval_index(expr, {b: i}, {i: I, j: J})
    np.testing.assert_array_equal(got, (J // 16) * 100 + I * 16 + J % 16 - 1)
