"""CPU schedule templates: random configs are correct on awkward shapes, spaces are sane."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from autotune.operators import (check_output, default_template_ref, default_template_refs, random_inputs,
                                reduction_size, reference_output)
from autotune.space import Config, ConfigSpace
from autotune.target import to_tvm_target
from autotune.task import Task, make_task
from autotune.templates import Template, resolve

CASES = [
    ("matmul", "M=17,N=33,K=19"),
    ("matmul", "M=1,N=1,K=1"),
    ("matmul", "M=32,N=64,K=48"),
    ("matmul", "M=8,N=100,K=16"),  # N padded to whole vectors: 104 or 112
    ("dense", "batch=1,in_features=37,out_features=64"),
    ("dense", "batch=16,in_features=64,out_features=48"),
    ("batch_matmul", "B=3,M=17,N=32,K=9"),
    ("batch_matmul", "B=1,M=8,N=16,K=16"),
    ("batch_matmul", "B=2,M=4,N=60,K=8"),
    ("conv2d", "C=3,H=17,W=13,K=5,R=3,S=3,stride=2,padding=0"),
    ("conv2d", "C=16,H=12,W=12,K=32,R=3,S=3,padding=2,dilation=2"),
    ("conv2d", "N=2,C=8,H=9,W=9,K=16,R=1,S=1"),
    ("conv2d", "C=4,H=8,W=8,K=32,R=3,S=3,padding=1,stride=2"),
    ("group_conv2d", "C=32,H=10,W=10,K=32,R=3,S=3,groups=4,padding=1"),  # 8 channels a group: one AVX2 vector
    ("group_conv2d", "N=2,C=12,H=9,W=9,K=6,R=3,S=3,groups=3,stride=2,padding=2,dilation=2"),
    ("group_conv2d", "C=8,H=9,W=9,K=16,R=3,S=3,groups=8,padding=2,dilation=2"),  # depthwise, multiplier 2, dilated
    ("depthwise_conv2d", "C=32,H=15,W=15,R=3,S=3,stride=2,padding=1"),
    ("depthwise_conv2d", "N=2,C=7,H=9,W=9,R=3,S=3"),
    ("depthwise_conv2d", "C=48,H=10,W=10,R=5,S=5,padding=2"),
]
CONFIGS_PER_CASE = 4
# Compiling and running random configs: one awkward shape per operator in the default tier, every shape in the slow
SWEEP = [case if case in {CASES[0], CASES[4], CASES[6], CASES[9], CASES[14], CASES[17]}
         else pytest.param(*case, marks=pytest.mark.slow) for case in CASES]


def _task(op: str, shape: str) -> Task:
    return make_task(op, shape)


def _template(task: Task):
    return resolve(default_template_ref(task.op, "llvm"))


def _config(space: ConfigSpace, **knobs) -> Config:
    """The config with the given knob values (tuples for splits); the rest at their first value."""
    digits = [k.candidates.index(knobs[k.name]) if k.name in knobs else 0 for k in space.knobs]
    return space.get(space.index_of(digits))


def _is_legal(cfg: Config) -> bool:
    """Configs the templates are documented to reject (depthwise: packed input cannot be inlined)."""
    return not (cfg.knobs.get("vec_axis") == "c" and cfg.knobs.get("input_at") == "inline")


def _run(task: Task, sch, template=None, cfg=None) -> str | None:
    """Compile and run a schedule (given its template and config: the template's kernel of that config, on the
    inputs relaid as it takes them); None when the output matches the numpy reference."""
    import tvm

    ex = tvm.compile(template.kernel(task, cfg) if template else sch.mod, target=to_tvm_target(task.target))
    inputs = random_inputs(task.opdef, task.shape, task.dtype)
    args = [tvm.runtime.tensor(x) for x in (template.kernel_inputs(task, cfg, inputs) if template else inputs)]
    ref = reference_output(task.opdef, task.shape, task.dtype, inputs)
    out = tvm.runtime.tensor(task.element.unfilled(ref.shape))
    ex(*args, out)
    return check_output(out.numpy(), ref, reduction_size(task.opdef, task.shape), task.dtype)


@pytest.mark.parametrize("op,shape", SWEEP)
def test_random_configs_match_reference(op: str, shape: str) -> None:
    task = _task(op, shape)
    template = _template(task)
    space = template.define_space(task)
    rng = np.random.default_rng(sum(map(ord, op + shape)))
    legal = [space.get(i) for i in space.sample(rng, 40)]
    legal = [c for c in legal if _is_legal(c)][:CONFIGS_PER_CASE]
    assert legal
    for cfg in legal:
        err = _run(task, template.apply(task, cfg), template, cfg)
        assert err is None, f"{cfg.knobs}: {err}"


@pytest.mark.parametrize("op,shape", CASES)
def test_space_is_nontrivial_and_round_trips(op: str, shape: str) -> None:
    task = _task(op, shape)
    space = _template(task).define_space(task)
    assert len(space) > 1
    for index in np.random.default_rng(0).integers(len(space), size=20).tolist() + [0, len(space) - 1]:
        cfg = space.get(index)
        digits = [k.candidates.index(cfg[k.name]) for k in space.knobs]
        assert space.index_of(digits) == index
        assert space.get(space.index_of(digits)).knobs == cfg.knobs


@pytest.mark.parametrize("op,shape", CASES)
def test_tile_knobs_are_exact_and_bounded(op: str, shape: str) -> None:
    """Every split multiplies to its axis, except a GEMM's N tiles: to N rounded up to whole vector tiles, and its M
    tiles: to M rounded up to whole register tiles."""
    from search_spaces.common import MAX_PAD, vector_lanes

    task = _task(op, shape)
    space = _template(task).define_space(task)
    splits = [k for k in space.knobs if k.kind == "split"]
    assert splits
    for knob in splits:
        extents = {math.prod(c) for c in knob.candidates}
        exact = min(extents)
        assert all(c[-1] <= 64 for c in knob.candidates), knob.name
        if task.op in ("matmul", "dense", "batch_matmul") and knob.name in ("tile_i", "tile_j"):
            padded = [c for c in knob.candidates if math.prod(c) != exact]
            step = vector_lanes(task) if knob.name == "tile_j" else 1
            assert all(c[-1] % step == 0 and math.prod(c) == -(-exact // c[-1]) * c[-1]
                       and math.prod(c) <= exact * (1 + MAX_PAD) for c in padded), knob.name
        else:
            assert len(extents) == 1, f"{knob.name}: factors do not all multiply to the same extent"


AVX2 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2, "mattr": ["-avx512f"]}  # a Zen 4 without AVX-512
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}


def test_vectorised_axis_prefers_whole_vectors_of_the_target() -> None:
    for target, lanes in ((AVX2, 8), (AVX512, 16)):
        task = make_task("matmul", "M=1024,N=1024,K=1024", target=target)
        space = _template(task).define_space(task)
        assert {c[-1] for c in space["tile_j"].candidates} == set(range(lanes, 65, lanes))  # 24: N padded to 1032
        assert all(c[-1] <= 16 for c in space["tile_i"].candidates)
        conv = make_task("conv2d", "C=64,H=56,W=56,K=64,R=3,S=3,padding=1", target=target)
        assert {c[-1] for c in _template(conv).define_space(conv)["tile_k"].candidates} == {lanes, 16, 32, 64}
        dense = make_task("dense", "batch=128,in_features=768,out_features=3072", target=target)
        inner = {c[-1] for c in _template(dense).define_space(dense)["tile_j"].candidates}
        assert inner == set(range(lanes, 65, lanes))  # 3072 = 2^10 x 3; 40 and 56 padded to 3080


def test_a_vector_of_other_than_a_power_of_two_lanes_is_unrolled_vectors() -> None:
    """LLVM would load and store a 48-lane vector element by element: 3 x 16 lanes instead, same numbers."""
    task = _task("dense", "batch=8,in_features=32,out_features=96")
    template = _template(task)
    space = template.define_space(task)
    cfg = _config(space, tile_i=(1, 2, 4), tile_j=(1, 2, 48), pack_b="pre")
    script = template.apply(task, cfg).mod.script()
    assert "T.vectorized(16)" in script and "T.unroll(3)" in script and "T.vectorized(48)" not in script
    assert _run(task, template.apply(task, cfg), template, cfg) is None


def test_register_tiles_are_limited_by_the_targets_vector_registers() -> None:
    from autotune.target import vector_unit

    assert vector_unit(AVX2) == (8, 16) and vector_unit(AVX512) == (16, 32)
    assert vector_unit({"kind": "llvm", "mcpu": "haswell"}) == (8, 16)
    for op, shape, knobs in (("matmul", "M=256,N=256,K=64", ("tile_i", "tile_j")),
                             ("conv2d", "C=16,H=28,W=28,K=64,R=3,S=3,padding=1", ("tile_x", "tile_k"))):
        avx2, avx512 = make_task(op, shape, target=AVX2), make_task(op, shape, target=AVX512)
        s2, s512 = _template(avx2).define_space(avx2), _template(avx512).define_space(avx512)
        assert (s2.max_register_tile, s512.max_register_tile) == (14 * 8, 30 * 16)  # all but 2 registers
        assert s2.allowed_count() < len(s2) and s512.allowed_count() < len(s512)
        for i in s2.sample(np.random.default_rng(0), 50):
            cfg = s2.get(i)
            assert cfg[knobs[0]][-1] * cfg[knobs[1]][-1] <= 112
    task = make_task("matmul", "M=256,N=256,K=64", target=AVX2)
    space = _template(task).define_space(task)
    tile = lambda i2, j2: space.index_of_values(  # noqa: E731
        {**space.get(0).knobs, "tile_i": (256 // i2, 1, i2), "tile_j": (256 // j2, 1, j2)})
    assert space.allows(tile(4, 16)) and space.allows(tile(1, 64)) and space.allows(tile(8, 8))  # 8 ymm accumulators
    assert not space.allows(tile(4, 32)) and not space.allows(tile(16, 16))  # 16 and 32: they spill


def test_matmul_schedule_structure() -> None:
    task = _task("matmul", "M=64,N=128,K=32")
    space = _template(task).define_space(task)
    cfg = _config(space, tile_i=(2, 4, 8), tile_j=(2, 1, 64), tile_k=(2, 16), pack_b="root", auto_unroll=16)
    script = _template(task).apply(task, cfg).mod.script()
    assert "T.parallel(4" in script  # i0 x j0 fused
    assert "T.vectorized(64)" in script
    assert "T.unroll(8)" in script
    assert "B_pack = T.sblock_alloc_buffer((2, 32, 64))" in script  # packed [N/64, K, 64]
    assert '"pragma_auto_unroll_max_step": 16' in script
    assert 'T.sblock("C_acc_init")' in script and 'T.sblock("C")' in script  # the accumulator, its write-back
    no_unroll = _config(space, tile_i=(2, 4, 8), tile_j=(2, 1, 64), tile_k=(2, 16), auto_unroll=0)
    assert "pragma_auto_unroll_max_step" not in _template(task).apply(task, no_unroll).mod.script()


def test_dense_takes_weight_packed_ahead() -> None:
    task = _task("dense", "batch=8,in_features=32,out_features=64")
    template = _template(task)
    space = template.define_space(task)
    cfg = _config(space, tile_j=(1, 2, 32), pack_b="pre")
    script = template.apply(task, cfg).mod.script()
    assert "W: T.Buffer((2, 32, 32)" in script and "W_global" not in script  # no copy inside the kernel
    x, w = random_inputs(task.opdef, task.shape, task.dtype)
    packed = template.kernel_inputs(task, cfg, [x, w])[1]
    assert np.array_equal(packed, w.reshape(2, 32, 32).transpose(0, 2, 1))  # [N/32, K, 32]
    assert _run(task, template.apply(task, cfg), template, cfg) is None
    with pytest.raises(ValueError, match="W"):  # W in its own layout is refused
        _run(task, template.apply(task, cfg))


def test_gemm_pads_n_to_whole_vector_tiles() -> None:
    """N = 1001 (7 x 11 x 13) has no divisor of 8 lanes: it is padded to 1008, 1024 or 1040, and every way of making
    the padded B (packed in the kernel, packed per tile, a padded copy, dense's weight packed ahead) computes C."""
    dense = make_task("dense", "batch=128,in_features=768,out_features=1001", target=AVX2)
    cands = _template(dense).define_space(dense)["tile_j"].candidates
    assert {c[-1] for c in cands} == set(range(8, 65, 8)) and {math.prod(c) for c in cands} == {1008, 1024, 1040}
    ukernel = make_task("matmul", "M=128,N=1001,K=64", target=AVX2)
    exact = resolve("search_spaces.matmul:MATMUL_UKERNEL_CPU").define_space(ukernel)["tile_j"].candidates
    assert {math.prod(c) for c in exact} == {1001}  # it reads B in place: no padding
    for op, shape, packs in (("matmul", "M=16,N=60,K=24", ("root", "tile", "none")),
                             ("batch_matmul", "B=2,M=8,N=60,K=8", ("root", "tile", "none")),
                             ("dense", "batch=8,in_features=24,out_features=60", ("pre",))):
        task = make_task(op, shape, target=AVX2)
        template = _template(task)
        space = template.define_space(task)
        for pack in packs:
            cfg = _config(space, tile_j=(4, 1, 16), pack_b=pack)  # 64 columns, 4 of them zero
            sch = template.apply(task, cfg)
            script = sch.mod.script()
            assert "C_acc = T.sblock_alloc_buffer" in script and "64)" in script.split("C_acc = ")[1].split("\n")[0]
            assert "T.vectorized(16)" in script
            assert _run(task, sch, template, cfg) is None, (op, pack)
    task = make_task("dense", "batch=1,in_features=4,out_features=60", target=AVX2)
    x, w = random_inputs(task.opdef, task.shape, task.dtype)
    cfg = _config(_template(task).define_space(task), tile_j=(8, 1, 8), pack_b="pre")
    packed = _template(task).kernel_inputs(task, cfg, [x, w])[1]
    assert packed.shape == (8, 4, 8) and np.array_equal(packed[7, :, 4:], np.zeros((4, 4), np.float32))
    assert np.array_equal(packed.transpose(0, 2, 1).reshape(64, 4)[:60], w)


def test_gemm_pads_m_to_whole_register_tiles() -> None:
    """M = 1024 gets 12- and 14-row register tiles over M padded to 1032 and 1036 (the uKernel, which reads row
    blocks of A, does not pad); a padded M computes C (its extra rows read A's last row and are not written) with
    N padded too, and with each way of reading B."""
    big = make_task("matmul", "M=1024,N=1024,K=1024", target=AVX512)
    cands = _template(big).define_space(big)["tile_i"].candidates
    assert {(2, 43, 12), (2, 37, 14), (3, 57, 6)} <= set(cands) and max(math.prod(c) for c in cands) <= 1024 * 1.125
    exact = resolve("search_spaces.matmul:MATMUL_UKERNEL_CPU").define_space(big)["tile_i"].candidates
    assert {math.prod(c) for c in exact} == {1024}
    for op, shape, packs in (("matmul", "M=46,N=60,K=24", ("root", "tile", "none")),
                             ("batch_matmul", "B=2,M=46,N=64,K=8", ("root", "none")),
                             ("dense", "batch=46,in_features=24,out_features=64", ("pre",))):
        task = make_task(op, shape, target=AVX2)
        template = _template(task)
        space = template.define_space(task)
        for pack in packs:
            cfg = _config(space, tile_i=(2, 2, 12), tile_j=(4, 1, 16), pack_b=pack)  # 48 rows, 2 past M
            sch = template.apply(task, cfg)
            assert "C_acc = T.sblock_alloc_buffer((48, 64))" in sch.mod.script().replace("(2, 48, 64)", "(48, 64)")
            assert _run(task, sch, template, cfg) is None, (op, pack)


def test_an_untuned_gemm_of_a_few_rows_streams_b_two_panels_four_rows_of_k_at_a_time() -> None:
    """Below FEW_ROWS rows the untuned config's parallel jobs take two panels of B (mid tile 2) and read 4 rows
    of K of one, then of the other; from FEW_ROWS rows on, the register-tile preference (K 256 at a time)."""
    from autotune.templates import heuristic_configs
    from search_spaces.matmul import FEW_ROWS

    for target, width in ((AVX2, 24), (AVX512, 32)):
        for rows in (1, 3, FEW_ROWS - 1):
            for op, shape in (("matmul", f"M={rows},N=768,K=512"), ("dense", f"batch={rows},in_features=512,"
                                                                     "out_features=768")):
                task = make_task(op, shape, target=target)
                cfg = heuristic_configs(_template(task), task, count=1)[0]
                assert cfg["tile_j"][-2:] == (2, width) and cfg["tile_k"][-1] == 4, (op, shape, target, cfg.knobs)
        task = make_task("matmul", f"M={FEW_ROWS},N=768,K=512", target=target)
        assert heuristic_configs(_template(task), task, count=1)[0]["tile_k"][-1] == 256
    for op, shape in (("matmul", "M=3,N=100,K=70"), ("dense", "batch=1,in_features=64,out_features=52"),
                      ("batch_matmul", "B=2,M=2,N=40,K=36")):  # N padded, K not a multiple of 4: still right
        task = _task(op, shape)
        template = _template(task)
        cfg = heuristic_configs(template, task, count=1)[0]
        assert _run(task, template.apply(task, cfg), template, cfg) is None, cfg.knobs


def test_a_derived_few_row_kernel_takes_four_panels_per_job_while_two_jobs_are_left() -> None:
    from search_spaces.matmul import dense_derived_knobs

    task = make_task("dense", "batch=1,in_features=768,out_features=768", target=AVX2)
    tuned = {"tile_i": (1, 1, 4), "tile_k": (3, 256), "mid_order": "ij", "pack_b": "pre", "auto_unroll": 64}
    for tile_j, want in (((32, 1, 24), (8, 4, 24)), ((16, 2, 24), (8, 4, 24)), ((6, 1, 32), (3, 2, 32)),
                         ((2, 1, 24), (2, 1, 24)), ((4, 1, 24), (2, 2, 24))):
        derived = dense_derived_knobs(task, {**tuned, "tile_j": tile_j})
        assert derived["tile_j"] == want and derived["tile_k"] == (192, 4), (tile_j, derived)


def test_a_dense_narrower_than_its_register_tile_takes_its_weight_padded_to_the_tile() -> None:
    """52 outputs on one 56-column panel (7 vectors of an AVX2 target): W arrives as [1, K, 56], zeros past
    column 52."""
    task = make_task("dense", "batch=4,in_features=32,out_features=52", target=AVX2)
    template = _template(task)
    cfg = _config(template.define_space(task), tile_j=(1, 1, 56))
    [relayout] = template.relayouts(task, cfg)
    assert relayout.shape == (1, 32, 56)
    assert _run(task, template.apply(task, cfg), template, cfg) is None


def test_a_relayout_may_pad_but_not_merge() -> None:
    from autotune.templates import relayout_array

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(relayout_array(a, lambda i, j: (j, i)), a.T)
    assert np.array_equal(relayout_array(a, lambda i, j: (i, j + 1)), [[0, 0, 1, 2], [0, 3, 4, 5]])
    with pytest.raises(ValueError, match="two elements"):
        relayout_array(a, lambda i, j: (i, j // 2))


def test_conv2d_packed_kernel_takes_weight_packed_ahead() -> None:
    """The packed variant's schedule copies the weight in a PREPACK block (so an exported trace runs on W as it is);
    its compiled kernel (`Template.kernel`) drops the copy and takes W packed ahead, as a model's constant weight."""
    from autotune.templates import PREPACK

    task = _task("conv2d", "C=8,H=8,W=8,K=32,R=3,S=3,padding=1")
    template = _template(task)
    space = template.define_space(task)
    cfg = _config(space, vec_axis="k", tile_k=(2, 1, 16), tile_x=(1, 2, 4), pad="root")
    sch = template.apply(task, cfg)
    assert f'"{PREPACK}": 1' in sch.mod.script()
    assert _run(task, sch) is None  # the schedule as it is: W copied in the kernel
    kernel = template.kernel(task, cfg)
    assert "weight_global: T.Buffer((2, 8, 3, 3, 16)" in kernel.script() and "weight[" not in kernel.script()
    assert "(2, 8, 3, 3, 16)" in str(kernel["main"].ty)  # its type too (Relax's call_tir checks it)
    x, w = random_inputs(task.opdef, task.shape, task.dtype)
    packed = template.kernel_inputs(task, cfg, [x, w])[1]
    assert np.array_equal(packed, w.reshape(2, 16, 8, 3, 3).transpose(0, 2, 3, 4, 1))  # [K/16, C, R, S, 16]
    assert _run(task, sch, template, cfg) is None  # the kernel on W packed ahead
    direct = _config(space, vec_axis="x", tile_k=(1, 1, 32), tile_x=(1, 1, 8))
    assert template.relayouts(task, direct) == () and template.kernel(task, direct).script() == \
        template.apply(task, direct).mod.script()


def test_conv2d_packed_variant_structure() -> None:
    task = _task("conv2d", "C=8,H=8,W=8,K=32,R=3,S=3,padding=1")
    space = _template(task).define_space(task)
    cfg = _config(space, vec_axis="k", tile_k=(1, 1, 32), tile_x=(1, 2, 4), pad="root")
    script = _template(task).apply(task, cfg).mod.script()
    assert "weight_global = T.sblock_alloc_buffer((1, 8, 3, 3, 32))" in script
    assert "conv_global = T.sblock_alloc_buffer((1, 1, 8, 8, 32))" in script
    assert "T.vectorized(32)" in script and "T.parallel(" in script
    direct = _config(space, vec_axis="x", tile_k=(1, 1, 32), tile_x=(1, 1, 8), pad="inline")
    script = _template(task).apply(task, direct).mod.script()
    assert "weight_global" not in script and 'T.sblock("pad")' not in script
    assert "T.vectorized(8)" in script


def test_depthwise_packed_variant_structure() -> None:
    task = _task("depthwise_conv2d", "C=32,H=8,W=8,R=3,S=3,padding=1")
    space = _template(task).define_space(task)
    cfg = _config(space, vec_axis="c", tile_c=(2, 16), input_at="tile")
    sch = _template(task).apply(task, cfg)
    script = sch.mod.script()
    assert "pad = T.sblock_alloc_buffer((1, 2, 10, 10, 16))" in script
    assert "T.vectorized(16)" in script and "T.parallel(" in script
    assert _run(task, sch) is None
    with pytest.raises(ValueError):
        _template(task).apply(task, _config(space, vec_axis="c", tile_c=(2, 16), input_at="inline"))


def test_depthwise_packed_kernel_takes_weight_packed_ahead() -> None:
    """As conv2d's packed variant: the schedule copies W in a PREPACK block, the kernel takes W packed ahead."""
    from autotune.templates import PREPACK

    task = _task("depthwise_conv2d", "C=32,H=8,W=8,R=3,S=3,padding=1")
    template = _template(task)
    space = template.define_space(task)
    cfg = _config(space, vec_axis="c", tile_c=(2, 16), input_at="root")
    sch = template.apply(task, cfg)
    assert f'"{PREPACK}": 1' in sch.mod.script()
    kernel = template.kernel(task, cfg).script()
    assert "weight_global: T.Buffer((2, 3, 3, 1, 16)" in kernel and "weight[" not in kernel
    x, w = random_inputs(task.opdef, task.shape, task.dtype)
    packed = template.kernel_inputs(task, cfg, [x, w])[1]
    assert np.array_equal(packed, w.reshape(2, 16, 1, 3, 3).transpose(0, 3, 4, 2, 1))  # [C/16, R, S, 1, 16]
    assert _run(task, sch, template, cfg) is None
    direct = _config(space, vec_axis="x", tile_c=(2, 16), input_at="inline")  # a candidate with 8 and 16 lanes
    assert template.relayouts(task, direct) == () and template.kernel(task, direct).script() == \
        template.apply(task, direct).mod.script()


def test_illegal_config_raises() -> None:
    task = _task("matmul", "M=16,N=16,K=16")
    space = _template(task).define_space(task)
    bad = Config(0, {**space.get(0).knobs, "tile_i": (3, 5, 1)})  # 15 != 16
    with pytest.raises(RuntimeError):
        _template(task).apply(task, bad)


def test_every_default_template_resolves_for_its_op() -> None:
    for (op, kind), ref in default_template_refs().items():
        template = resolve(ref)
        assert (template.op, template.target_kind) == (op, kind)


def test_template_version_fingerprints_schedules(tmp_path, monkeypatch) -> None:
    """Same schedules -> same version whatever the code looks like; another schedule -> another version."""
    import json

    from autotune import fingerprint
    from search_spaces.common import vector_lanes
    from search_spaces.matmul import MATMUL_CPU, matmul_apply, matmul_space

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))

    def apply_refactored(task, cfg):  # other source, same schedule
        return matmul_apply(task, cfg)

    def apply_unrolled(task, cfg):  # one more annotation: another schedule
        sch = matmul_apply(task, cfg)
        sch.annotate(sch.get_loops(sch.get_sblock("C_acc_update"))[0], "pragma_auto_unroll_max_step", 7)
        return sch

    def space_other_on_avx2(task):  # the same space on AVX-512, knobs in another order on AVX2
        space = matmul_space(task)
        return space if vector_lanes(task) == 16 else dataclasses.replace(space, knobs=space.knobs[::-1])

    same = Template("mm_refactored", "matmul", "llvm", matmul_space, apply_refactored, dtypes=MATMUL_CPU.dtypes)
    other = Template("mm_unrolled", "matmul", "llvm", matmul_space, apply_unrolled)
    avx2 = Template("mm_avx2", "matmul", "llvm", space_other_on_avx2, matmul_apply)
    reference = fingerprint.compute_fingerprint(MATMUL_CPU)
    assert fingerprint.schedule_fingerprint(same) == reference
    assert fingerprint.schedule_fingerprint(other) != reference
    assert fingerprint.schedule_fingerprint(avx2) != reference  # every target kind's vector units are probed
    cached = json.loads((tmp_path / "template_versions.json").read_text())
    assert reference in cached.values() and len(cached) == 3


@pytest.mark.parametrize("shape", ["B=3,M=1,N=1,K=8", "B=2,M=1,N=1,K=1"])
def test_degenerate_gemm_shapes_schedule_and_compute(shape) -> None:
    """Attention in small vision transformers (Levit) gives 1x1 outputs: every config still builds right."""
    task = _task("batch_matmul", shape)
    template = _template(task)
    space = template.define_space(task)
    for index in range(0, len(space), max(1, len(space) // 6)):
        assert _run(task, template.apply(task, space.get(index))) is None


def test_records_of_a_compatible_template_version_still_choose_a_build_kernel():
    """GEMM logs of the version before the register-tile write-back still name the same configs (same space)."""
    from autotune.measure.types import MeasureInput, MeasureResult
    from autotune.database import TuningDatabase
    from autotune.records import Record

    ref = "search_spaces.matmul:MATMUL_CPU"
    template = resolve(ref)
    task = make_task("matmul", {"M": 64, "N": 48, "K": 32})
    space = template.define_space(task)
    old, now, other = (Record(MeasureInput(task, space.get(i), ref), MeasureResult((t,), None, "", 0.0, 0.0), v, 1, {})
                       for i, t, v in ((3, 1e-5, template.compatible_versions[0]), (4, 2e-5, template.version),
                                       (5, 1e-6, "0123456789ab")))
    assert template.compatible_versions and template.version not in template.compatible_versions
    db = TuningDatabase([old, now, other])
    assert db.records(current=True) == [old, now]  # the unknown version is not this space's
    assert db.best_by_task()[task.key] is old
    from cost_models.dataset import records_dataset
    from cost_models.features import FeatureCache

    assert len(records_dataset([old, now], "knob", cache=FeatureCache())) == 2  # both train the cost model
