"""CUDA templates: configs compile to CUDA source that matches their knobs; the limits filter is right.

Runs without a GPU: `tvm.compile` for a CUDA target only generates source here. The numeric
check at the end runs only where `tvm.cuda(0).exist`.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from autotune.gpu_limits import KernelResources, check_config, check_resources, compute_capability, limits_for
from autotune.operators import check_output, random_inputs, reduction_size, reference_output
from autotune.space import Config
from autotune.target import compile_kernel
from autotune.task import Task, make_task
from autotune.templates import Template
from search_spaces.cuda_conv2d import CONV2D_CUDA, GROUP_CONV2D_CUDA
from search_spaces.cuda_depthwise import DEPTHWISE_CUDA
from search_spaces.cuda_gemm import BATCH_MATMUL_CUDA, DENSE_CUDA, MATMUL_CUDA
from search_spaces.matmul import MATMUL_CPU

UNROLL = {"auto_unroll": 512, "unroll_explicit": True}
MM_1024 = "M=1024,N=1024,K=1024"
CONV_56 = "C=64,H=56,W=56,K=64,R=3,S=3,padding=1"
# 128 x 128 block tile, 16 x 16 threads, 8 x 8 outputs per thread (2 x 2 vthreads of 4 x 4), BK 32
GOOD_MATMUL = {"tile_i": (8, 2, 16, 4), "tile_j": (8, 2, 16, 4), "tile_k": (32, 4, 8), "fetch_vec": 4,
               "double_buffer": False, **UNROLL}
GOOD_CONV = {"tile_k": (4, 2, 4, 2), "tile_y": (7, 1, 8, 1), "tile_x": (4, 1, 14, 1), "tile_c": (16, 4),
             "tile_r": (1, 3), "tile_s": (1, 3), **UNROLL}

TEMPLATES = {"matmul": MATMUL_CUDA, "dense": DENSE_CUDA, "batch_matmul": BATCH_MATMUL_CUDA,
             "conv2d": CONV2D_CUDA, "depthwise_conv2d": DEPTHWISE_CUDA, "group_conv2d": GROUP_CONV2D_CUDA}
CASES = [
    ("matmul", MM_1024),
    ("matmul", "M=17,N=33,K=19"),
    ("dense", "batch=64,in_features=512,out_features=1000"),
    ("dense", "batch=1,in_features=37,out_features=64"),
    ("batch_matmul", "B=4,M=128,N=96,K=64"),
    ("batch_matmul", "B=3,M=17,N=32,K=9"),
    ("conv2d", CONV_56),
    ("conv2d", "C=16,H=12,W=12,K=32,R=3,S=3,stride=2,padding=2,dilation=2"),
    ("conv2d", "N=2,C=8,H=9,W=9,K=16,R=1,S=1"),
    ("depthwise_conv2d", "C=64,H=56,W=56,R=3,S=3,padding=1"),
    ("depthwise_conv2d", "N=2,C=7,H=9,W=9,R=3,S=3"),
    ("group_conv2d", "C=32,H=14,W=14,K=64,R=3,S=3,groups=4,padding=1"),
    ("group_conv2d", "N=2,C=12,H=9,W=9,K=6,R=3,S=3,groups=3,stride=2,padding=2,dilation=2"),
]
CONFIGS_PER_CASE = 3
# Generating CUDA for random configs: one awkward shape per operator in the default tier, every shape in the slow
SWEEP = [case if case in {CASES[1], CASES[3], CASES[5], CASES[8], CASES[10], CASES[12]}
         else pytest.param(*case, marks=pytest.mark.slow) for case in CASES]
SHARED_ARRAY = re.compile(r"__shared__[^;]*?\bfloat (\w+?)(?:_ptr)?\[(\d+)\]")


def _task(op: str, shape: str) -> Task:
    return make_task(op, shape, target="cuda", arch="sm_90")


def _valid_configs(template: Template, task: Task, n: int, seed: int = 0) -> list[Config]:
    """The first `n` random configs of the space that pass the limits filter."""
    space = template.define_space(task)
    configs = [space.get(i) for i in space.sample(np.random.default_rng(seed), 40 * n)]
    return [c for c in configs if check_config(task, template, c) is None][:n]


def _cuda_source(template: Template, task: Task, cfg: Config) -> str:
    return compile_kernel(template.apply(task, cfg).mod, task.target).mod.imports[0].inspect_source()


def _resources(template: Template, task: Task, cfg: Config) -> KernelResources:
    return template.kernel_resources(task, cfg)


def _check_source(src: str, res: KernelResources) -> None:
    """The kernel's launch bounds, shared arrays and barriers are what the knobs promise."""
    assert f"__launch_bounds__({res.threads})" in src or res.threads == 1
    assert "threadIdx.x" in src or res.block[0] == 1
    static = sum(int(size) for _, size in SHARED_ARRAY.findall(src)) * 4
    assert static == (0 if res.dynamic_shared else res.shared_bytes), (static, res)
    assert ("extern __shared__" in src or "buf_dyn_shmem" in src) == res.dynamic_shared
    assert ("__syncthreads" in src) == (res.shared_bytes > 0)
    assert "blockIdx" in src or res.grid == (1, 1, 1)


@pytest.mark.parametrize("op,shape", SWEEP)
def test_random_valid_configs_compile_to_matching_cuda(op: str, shape: str) -> None:
    task = _task(op, shape)
    template = TEMPLATES[op]
    configs = _valid_configs(template, task, CONFIGS_PER_CASE)
    assert configs, "no config of the space passes the limits filter"
    for cfg in configs:
        _check_source(_cuda_source(template, task, cfg), _resources(template, task, cfg))


@pytest.mark.parametrize("op,shape,knobs", [("matmul", MM_1024, GOOD_MATMUL), ("conv2d", CONV_56, GOOD_CONV)])
def test_fast_configs_are_in_the_space_and_valid(op: str, shape: str, knobs: dict) -> None:
    task = _task(op, shape)
    template = TEMPLATES[op]
    space = template.define_space(task)
    for name, value in knobs.items():
        assert value in space[name].candidates, name
    cfg = Config(0, knobs)
    assert check_config(task, template, cfg) is None
    src = _cuda_source(template, task, cfg)
    _check_source(src, _resources(template, task, cfg))


def test_good_matmul_kernel_uses_vector_loads_and_register_tiles() -> None:
    task = _task("matmul", MM_1024)
    src = _cuda_source(MATMUL_CUDA, task, Config(0, GOOD_MATMUL))
    assert "__launch_bounds__(256)" in src
    assert sorted(SHARED_ARRAY.findall(src)) == [("A_shared", "4096"), ("B_shared", "4096")]
    assert "float4" in src
    assert re.search(r"float C_local\w*\[64\]", src)


# BK 16: 128 x 16 tiles, 2 x 16 KiB double-buffered (static); GOOD_MATMUL's BK 32 doubled is 64 KiB (dynamic)
DOUBLE_STATIC = {**GOOD_MATMUL, "tile_k": (64, 2, 8), "double_buffer": True}
DOUBLE_DYNAMIC = {**GOOD_MATMUL, "double_buffer": True}


@pytest.mark.parametrize("arch,async_copies", [("sm_90", True), ("sm_75", False)])
def test_double_buffered_matmul_loads_the_next_tiles_into_a_second_pair(arch: str, async_copies: bool) -> None:
    task = make_task("matmul", MM_1024, target="cuda", arch=arch)
    single = _cuda_source(MATMUL_CUDA, task, Config(0, {**DOUBLE_STATIC, "double_buffer": False}))
    assert sorted(SHARED_ARRAY.findall(single)) == [("A_shared", "2048"), ("B_shared", "2048")]
    cfg = Config(0, DOUBLE_STATIC)
    assert check_config(task, MATMUL_CUDA, cfg) is None
    src = _cuda_source(MATMUL_CUDA, task, cfg)
    assert sorted(SHARED_ARRAY.findall(src)) == [("A_shared", "4096"), ("B_shared", "4096")]
    assert "((k_0 + 1) & 1)" in src  # step k0 + 1 goes to the other half of each tile
    # from sm_80 on, 16-byte cp.async copies, at most one group (the next step's) in flight during the compute
    assert ("cp.async.cg.shared.global" in src) == async_copies
    assert ("cp.async.wait_group 1" in src) == async_copies
    assert "cp.async" not in single
    _check_source(src, _resources(MATMUL_CUDA, task, cfg))


def test_double_buffered_tiles_over_48_kib_use_dynamic_shared_memory_up_to_the_opt_in_limit() -> None:
    task = _task("matmul", MM_1024)
    cfg = Config(0, DOUBLE_DYNAMIC)
    res = _resources(MATMUL_CUDA, task, cfg)
    assert res.dynamic_shared and res.shared_bytes == 2 * 32768
    assert check_config(task, MATMUL_CUDA, cfg) is None
    src = _cuda_source(MATMUL_CUDA, task, cfg)
    assert not SHARED_ARRAY.findall(src) and "buf_dyn_shmem" in src
    _check_source(src, res)
    bigger = Config(0, {**DOUBLE_DYNAMIC, "tile_i": (4, 2, 16, 8)})  # 256 x 32 and 32 x 128 tiles, twice: 96 KiB
    assert check_config(task, MATMUL_CUDA, bigger) is None  # sm_90 opts in to 227 KiB
    turing = make_task("matmul", MM_1024, target="cuda", arch="sm_75")
    assert check_config(turing, MATMUL_CUDA, bigger) == "98304 bytes of dynamic shared memory > 65536"
    static = Config(0, {**bigger.knobs, "double_buffer": False})  # 48 KiB single tiles stay static
    assert not _resources(MATMUL_CUDA, task, static).dynamic_shared
    assert check_config(task, MATMUL_CUDA, static) is None


def test_conv2d_pad_is_inlined_into_the_shared_copy() -> None:
    src = _cuda_source(CONV2D_CUDA, _task("conv2d", CONV_56), Config(0, GOOD_CONV))
    # c1 = 4 channels x (8 + 2) rows x (14 + 2) cols of padded input; 16 x 4 x 3 x 3 weights
    assert sorted(SHARED_ARRAY.findall(src)) == [("pad_shared", "640"), ("weight_shared", "576")]
    assert "pad_ptr" not in src  # no global padded copy


def test_filter_rejects_too_many_threads() -> None:
    task = _task("conv2d", CONV_56)
    knobs = {**GOOD_CONV, "tile_k": (1, 1, 16, 4), "tile_y": (1, 1, 14, 4), "tile_x": (1, 1, 14, 4)}
    assert "threads per block" in check_config(task, CONV2D_CUDA, Config(0, knobs))


def test_filter_rejects_too_much_shared_memory() -> None:
    task = _task("matmul", MM_1024)
    knobs = {**GOOD_MATMUL, "tile_k": (16, 8, 8)}  # 128 x 64 x 2 floats = 64 KiB
    assert "shared memory" in check_config(task, MATMUL_CUDA, Config(0, knobs))


def test_filter_rejects_register_spills_and_bad_vectors() -> None:
    task = _task("matmul", MM_1024)
    big = {**GOOD_MATMUL, "tile_i": (4, 2, 16, 8), "tile_j": (4, 2, 16, 8), "tile_k": (128, 2, 4)}
    assert "registers" in check_config(task, MATMUL_CUDA, Config(0, big))
    odd = _task("matmul", "M=64,N=64,K=30")
    bad_vec = {**GOOD_MATMUL, "tile_i": (1, 1, 16, 4), "tile_j": (1, 1, 16, 4), "tile_k": (5, 3, 2)}
    assert "fetch vector" in check_config(odd, MATMUL_CUDA, Config(0, bad_vec))


def test_filter_ignores_cpu_templates() -> None:
    task = make_task("matmul", "M=64,N=64,K=64")
    space = MATMUL_CPU.define_space(task)
    assert check_config(task, MATMUL_CPU, space.get(0)) is None


@pytest.mark.parametrize("tuner_name", ["random", "grid"])
def test_model_free_tuners_skip_configs_over_the_gpu_limits(tuner_name: str) -> None:
    from autotune.tuners.simple import GridTuner, RandomTuner

    task = _task("conv2d", CONV_56)
    ref = "search_spaces.cuda_conv2d:CONV2D_CUDA"
    space = CONV2D_CUDA.define_space(task)
    uniform = space.sample(np.random.default_rng(0), 64)
    assert sum(check_config(task, CONV2D_CUDA, space.get(i)) is not None for i in uniform) > 16  # the filter matters
    tuner = (RandomTuner if tuner_name == "random" else GridTuner)(task, space, ref, seed=0)
    batch = tuner.next_batch(32) + tuner.next_batch(32)
    assert len(batch) == len(set(batch)) == 64
    assert all(check_config(task, CONV2D_CUDA, space.get(i)) is None for i in batch)


def test_limits_per_arch() -> None:
    assert compute_capability("sm_90a") == 90
    assert limits_for("sm_90").max_shared_optin == 227 * 1024
    assert limits_for("sm_80").max_shared_bytes == 48 * 1024  # static shared memory: what TVM emits
    with pytest.raises(ValueError):
        limits_for("gfx90a")
    fits = KernelResources(block=(16, 16, 1), grid=(8, 8, 1), shared_bytes=32768, registers=128)
    assert check_resources(fits, limits_for("sm_90")) is None
    deep = KernelResources(block=(1, 1, 128), grid=(1, 1, 1), shared_bytes=0, registers=32)
    assert "threadIdx.z" in check_resources(deep, limits_for("sm_90"))


@pytest.mark.parametrize("knobs", [GOOD_MATMUL, DOUBLE_STATIC, DOUBLE_DYNAMIC], ids=["single", "double", "dynamic"])
def test_nvcc_compiles_generated_kernel(knobs: dict) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found on PATH")
    import tvm
    from tvm.support import nvcc

    src = _cuda_source(MATMUL_CUDA, _task("matmul", MM_1024), Config(0, knobs))
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
        cubin = nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")  # ptxas checks it too
    assert b"main_kernel" in bytes(cubin)


def _check_on_gpu(template: Template, task: Task, configs: list[Config]) -> None:
    import tvm

    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA device: numeric checks run on a GPU machine")
    inputs = random_inputs(task.opdef, task.shape, task.dtype)
    ref = reference_output(task.opdef, task.shape, task.dtype, inputs)
    dev = tvm.cuda(0)
    for cfg in configs:
        ex = compile_kernel(template.apply(task, cfg).mod, task.target)
        args = [tvm.runtime.tensor(a, dev) for a in template.kernel_inputs(task, cfg, inputs)]
        out = tvm.runtime.empty(ref.shape, task.element.output, dev)
        ex(*args, out)
        problem = check_output(out.numpy(), ref, reduction_size(task.opdef, task.shape), task.dtype)
        assert problem is None, (cfg.knobs, problem)


@pytest.mark.parametrize("op,shape", [CASES[1], CASES[3], CASES[5], CASES[7], CASES[10], CASES[12]])
def test_random_configs_are_numerically_correct_on_gpu(op: str, shape: str) -> None:
    task, template = _task(op, shape), TEMPLATES[op]
    _check_on_gpu(template, task, _valid_configs(template, task, CONFIGS_PER_CASE))


def test_double_buffered_matmuls_are_numerically_correct_on_gpu() -> None:
    configs = [Config(0, knobs) for knobs in (DOUBLE_STATIC, DOUBLE_DYNAMIC, {**DOUBLE_STATIC, "fetch_vec": 1})]
    _check_on_gpu(MATMUL_CUDA, _task("matmul", MM_1024), configs)


FP16_CASES = [("matmul", "M=256,N=128,K=64", "sm_80"), ("dense", "batch=128,in_features=256,out_features=192", "sm_90")]
NARROW = [("float16", "half"), ("bfloat16", "nv_bfloat16")]  # dtype, its CUDA type


def each_narrow_type(cases: list[tuple]) -> list:
    """pytest params of each case with each narrow type: case i with type i (modulo the types) in the default
    tier, so that every case and every type runs there; the other pairs are slow (nvcc: seconds each)."""
    return [pytest.param(*case, *narrow, marks=() if i % len(NARROW) == j else pytest.mark.slow)
            for i, case in enumerate(cases) for j, narrow in enumerate(NARROW)]


def _fp16_configs(op: str, shape: str, arch: str, dtype: str = "float16") -> tuple[Task, Template, list[Config]]:
    """A float16 (bfloat16) task, its template, and its untuned config and two random valid ones."""
    from autotune.model.default_schedule import heuristic_configs

    task = make_task(op, shape, dtype, target="cuda", arch=arch)
    template = TEMPLATES[op]
    return task, template, heuristic_configs(template, task, count=1) + _valid_configs(template, task, 2)


@pytest.mark.parametrize("op,shape,arch,dtype,cuda_type", each_narrow_type(FP16_CASES))
def test_narrow_float_gemms_run_on_tensor_cores(op: str, shape: str, arch: str, dtype: str, cuda_type: str) -> None:
    task, template, configs = _fp16_configs(op, shape, arch, dtype)
    assert "fetch_vec" in [k.name for k in template.define_space(task).knobs] and len(configs) == 3
    for cfg in configs:
        res = _resources(template, task, cfg)
        assert check_config(task, template, cfg) is None and res.dynamic_shared
        src = _cuda_source(template, task, cfg)
        assert f"__launch_bounds__({res.threads})" in src and res.block[0] == 32  # whole warps
        for call in ("wmma::fill_fragment", "wmma::load_matrix_sync", "wmma::mma_sync", "wmma::store_matrix_sync"):
            assert call in src, call
        layout = "col_major" if op == "dense" else "row_major"  # dense's W tile, read transposed
        assert f"wmma::matrix_b, 16, 16, 16, {cuda_type}, nvcuda::wmma::{layout}>" in src
        assert ("cp.async" in src) == cfg["double_buffer"]
    if shutil.which("nvcc") is not None:  # ptxas checks the fragments' types and the async copies too
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target({"kind": "cuda", "arch": arch}):
            cubin = nvcc.compile_cuda(_cuda_source(template, task, configs[0]), target_format="cubin", arch=arch,
                                      compiler="nvcc")
        assert b"main_kernel" in bytes(cubin)


@pytest.mark.parametrize("dtype,cuda_type", NARROW)
def test_narrow_float_gemms_off_the_tensor_core_tiles_widen_their_inputs(dtype: str, cuda_type: str) -> None:
    task = make_task("matmul", "M=20,N=24,K=40", dtype, target="cuda", arch="sm_80")
    for cfg in _valid_configs(MATMUL_CUDA, task, 2):
        src = _cuda_source(MATMUL_CUDA, task, cfg)
        assert "wmma" not in src and cuda_type in src


NARROW_CONV = "N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1"  # the fp16 conv2d: an implicit GEMM on tensor cores
NARROW_CONV_STRIDED = "N=2,C=16,H=15,W=15,K=32,R=3,S=3,stride=2,padding=1"  # N OH OW = 2 x 8 x 8, C R S = 144
NARROW_CONV_WIDENED = "N=1,C=3,H=20,W=20,K=24,R=3,S=3,padding=1"  # C R S = 27, K = 24: not in 16-element tiles


def _compiles_for(arch: str, src: str) -> None:
    if shutil.which("nvcc") is not None:  # ptxas checks the fragments' types and the async copies too
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target({"kind": "cuda", "arch": arch}):
            assert b"main_kernel" in bytes(nvcc.compile_cuda(src, target_format="cubin", arch=arch, compiler="nvcc"))


@pytest.mark.parametrize("shape,dtype,cuda_type", each_narrow_type([(NARROW_CONV,), (NARROW_CONV_STRIDED,)]))
def test_narrow_float_conv2d_runs_on_tensor_cores(shape: str, dtype: str, cuda_type: str) -> None:
    task, template, configs = _fp16_configs("conv2d", shape, "sm_80", dtype)
    for cfg in configs:
        src = _cuda_source(template, task, cfg)
        assert "wmma::mma_sync" in src and f"wmma::matrix_b, 16, 16, 16, {cuda_type}" in src
        assert [r.arg for r in template.relayouts(task, cfg)] == [1]  # the weight, as [K, C R S]
    _compiles_for("sm_80", _cuda_source(template, task, configs[0]))


@pytest.mark.parametrize("shape", [NARROW_CONV_STRIDED, "N=1,C=16,H=8,W=8,K=16,R=3,S=3,padding=2,dilation=2"])
def test_the_tensor_core_convolutions_gemm_computes_the_convolution(shape: str) -> None:
    """The implicit GEMM (patches of the padded input, the weight relaid), unscheduled and run on the CPU, equals
    the convolution: what the tensor cores compute, but for the fragment products, which the GEMMs' tests cover."""
    import tvm

    from search_spaces import cuda_conv2d_tc

    task = make_task("conv2d", shape, "float16", target="cuda", arch="sm_80")
    template = TEMPLATES["conv2d"]
    assert cuda_conv2d_tc.tiles(task) is not None  # on the tensor-core path
    inputs = random_inputs(task.opdef, task.shape, task.dtype)
    ref = reference_output(task.opdef, task.shape, task.dtype, inputs)
    cfg = template.define_space(task).get(0)
    lib = tvm.compile(tvm.IRModule({"main": cuda_conv2d_tc.gemm_func(task).with_attr("global_symbol", "main")}),
                      target="llvm")
    out = tvm.runtime.empty(ref.shape, task.element.output)
    lib["main"](*[tvm.runtime.tensor(a) for a in template.kernel_inputs(task, cfg, inputs)], out)
    assert check_output(out.numpy(), ref, reduction_size(task.opdef, task.shape), task.dtype) is None


@pytest.mark.parametrize("shape,dtype,cuda_type", each_narrow_type([(NARROW_CONV_WIDENED,)]))
def test_narrow_float_conv2d_off_the_tensor_core_tiles_widens_its_inputs(shape: str, dtype: str,
                                                                         cuda_type: str) -> None:
    task, template, configs = _fp16_configs("conv2d", shape, "sm_80", dtype)
    for cfg in configs:
        src = _cuda_source(template, task, cfg)
        assert "wmma" not in src and cuda_type in src and "float conv_local" in src  # fp32 sums, narrow in and out
    _compiles_for("sm_80", _cuda_source(template, task, configs[0]))


@pytest.mark.parametrize("dtype", [d for d, _ in NARROW])
@pytest.mark.parametrize("op,shape,arch", [*FP16_CASES, ("matmul", "M=20,N=24,K=40", "sm_80"),
                                           *[("conv2d", shape, "sm_80") for shape in (NARROW_CONV, NARROW_CONV_STRIDED,
                                                                                      NARROW_CONV_WIDENED)]])
def test_narrow_float_gemms_are_numerically_correct_on_gpu(op: str, shape: str, arch: str, dtype: str) -> None:
    task, template, configs = _fp16_configs(op, shape, arch, dtype)
    _check_on_gpu(template, task, configs)
