import json
import subprocess
import sys

import numpy as np
import pytest

from autotune.errors import AutotuneError
from autotune.operators import OPS, check_output, random_inputs
from autotune.target import (X86_FEATURE_FLAGS, cpu_name, extra_features, host_llvm_target, parse_target, read_cpuinfo,
                             unsupported_features)
from autotune.task import Task, make_task, parse_shape


@pytest.mark.slow  # a fresh Python process importing TVM
def test_key_is_stable_across_processes():
    task = make_task("conv2d", "C=64,H=56,W=56,K=64,R=3,S=3,padding=1")
    code = ("from autotune.task import make_task;"
            "print(make_task('conv2d', 'C=64,H=56,W=56,K=64,R=3,S=3,padding=1').key)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == task.key
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))).key == task.key


def test_key_changes_with_shape_and_target():
    a = make_task("matmul", "M=64,N=64,K=64")
    assert a.key != make_task("matmul", "M=64,N=64,K=32").key
    assert a.key != make_task("matmul", "M=64,N=64,K=64", target={"kind": "llvm", "mcpu": "x", "num-cores": 1}).key


def test_host_target_has_cpu_and_cores():
    t = make_task("matmul", "M=8,N=8,K=8").target
    assert t["kind"] == "llvm" and t["mcpu"] and t["num-cores"] >= 1


def test_host_target_switches_off_extensions_the_machine_hides():
    # a Zen 4 whose hypervisor hides AVX-512: LLVM calls it znver4, whose code dies of SIGILL there
    model = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "sse4.2"}
    flags = {"avx", "avx2", "fma", "sse4_2"}
    assert unsupported_features(model, flags) == ["avx512bw", "avx512f", "avx512vnni"]
    assert unsupported_features(model, flags | {"avx512f", "avx512bw", "avx512_vnni"}) == []
    host = host_llvm_target(2)
    flags = read_cpuinfo("/proc/cpuinfo")[0]
    off = {f[1:] for f in host.get("mattr", []) if f.startswith("-")}
    on = {f[1:] for f in host.get("mattr", []) if f.startswith("+")}
    assert all(X86_FEATURE_FLAGS[f] not in flags for f in off)  # only what this machine lacks is switched off
    assert all(X86_FEATURE_FLAGS[f] in flags for f in on)  # and only what it has is switched on
    assert extra_features({"avx512f"}, {"avx512f", "avx512_bf16", "amx_int8"}) == ["amx-int8", "avx512bf16"]
    if flags and "avx512f" not in flags and host["mcpu"] in ("znver4", "znver5", "skylake-avx512", "icelake-server"):
        assert "avx512f" in off
    assert parse_target("llvm").get("mattr") == host.get("mattr")
    assert "mattr" not in parse_target({"kind": "llvm", "mcpu": "haswell"})  # a CPU the user names is theirs
    assert cpu_name({"mcpu": "znver4", "mattr": ["-avx512f", "-avx512bw", "+fma"]}) == "znver4 without AVX-512 with fma"


@pytest.mark.parametrize("op,shape,needle", [
    ("convolution", "M=1", "unknown operator 'convolution'; choose one of: matmul"),
    ("matmul", "M=1,N=2", "missing parameter(s) K"),
    ("matmul", "M=1,N=2,K=3,Q=4", "unknown parameter(s) Q"),
    ("matmul", "M=0,N=2,K=3", "impossible shape for matmul: M=0"),
    ("conv2d", "C=3,H=2,W=2,K=4,R=3,S=3", "impossible shape for conv2d: output would be"),
    ("matmul", "M=x,N=2,K=3", "is not an integer"),
    ("matmul", "M,N=2,K=3", "expected name=value"),
])
def test_bad_input_is_one_clear_line(op, shape, needle):
    with pytest.raises(AutotuneError, match=None) as err:
        make_task(op, shape)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bad_target_and_dtype():
    with pytest.raises(AutotuneError, match="unknown target 'rocm'"):
        parse_target("rocm")
    with pytest.raises(AutotuneError, match="unsupported dtype"):
        make_task("matmul", "M=1,N=1,K=1", dtype="int3")
    assert parse_target("cuda", arch="sm_80")["arch"] == "sm_80"
    with pytest.raises(AutotuneError, match="sm_XX"):
        parse_target("cuda", arch="hopper")


def test_parse_shape():
    assert parse_shape("M=1, N=2,K=3") == {"M": 1, "N": 2, "K": 3}
    with pytest.raises(AutotuneError, match="M is given twice"):
        parse_shape("M=64,N=2,M=32")


def test_a_tensor_beyond_32_bit_indexing_is_refused_at_once():
    import time

    start = time.perf_counter()
    with pytest.raises(AutotuneError, match="more than the 2,147,483,647"):
        make_task("matmul", "M=1000000000,N=16,K=16")
    with pytest.raises(AutotuneError, match="its output"):
        make_task("conv2d", "N=64,C=1,H=4096,W=4096,K=64,R=1,S=1")
    assert time.perf_counter() - start < 5
    assert make_task("matmul", "M=1000000000,N=1,K=1").shape["M"] == 10**9  # 1e9 elements: within the limit


def test_factorisations_of_huge_extents_are_fast_and_unchanged():
    import time

    from autotune.space import _factorizations

    def every(n, parts):  # the definition: every divisor, innermost factors ascending
        if parts == 1:
            return [(n,)]
        return [(n // d,) + rest for d in range(1, n + 1) if n % d == 0 for rest in every(d, parts - 1)]

    for n in (1, 2, 12, 97, 360, 1024, 3136):
        for parts in (1, 2, 3, 4):
            assert _factorizations(n, parts) == every(n, parts)
    start = time.perf_counter()
    assert len(_factorizations(10**9, 3)) == 55 ** 2 and len(_factorizations(2**31 - 1, 3)) == 3  # a prime
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("target,needle", [
    ({"kind": "llvm", "num-cores": "x"}, "num-cores must be an integer >= 1, not 'x'"),
    ({"kind": "llvm", "num-cores": 0}, "num-cores must be an integer >= 1"),
    ({"kind": "llvm", "bogus": 1}, "Unknown config option 'bogus'"),
    ({"kind": "llvm", "mattr": "avx2"}, "Option 'mattr'"),
    ({"kind": "cuda", "arch": "sm_90", "max_num_threads": "a"}, "Option 'max_num_threads'"),
    ({"kind": "cuda", "arch": "sm_90", "bogus": 1}, "Unknown config option 'bogus'")])
def test_a_target_tvm_does_not_accept_is_one_error_up_front(target, needle):
    with pytest.raises(AutotuneError, match=None) as err:
        parse_target(target)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert parse_target({"kind": "llvm", "num-cores": 1, "mattr": ["+avx2"]})["num-cores"] == 1


def _naive_conv(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    out = np.zeros((n, k, oh, ow))
    for y in range(oh):
        for xx in range(ow):
            patch = xp[:, :, y * stride: y * stride + dil * (r - 1) + 1: dil, xx * stride: xx * stride + dil * (s - 1) + 1: dil]
            out[:, :, y, xx] = np.einsum("ncrs,kcrs->nk", patch, w)
    return out


def test_conv_references_match_naive_loops():
    op = OPS["conv2d"]
    p = op.complete({"N": 2, "C": 3, "H": 9, "W": 7, "K": 4, "R": 3, "S": 2, "stride": 2, "padding": 1, "dilation": 2})
    x, w = random_inputs(op, p, "float32")
    assert check_output(op.reference(p, [x, w]), _naive_conv(x, w, 2, 1, 2), 18) is None
    dw = OPS["depthwise_conv2d"]
    p = dw.complete({"N": 1, "C": 5, "H": 8, "W": 8, "R": 3, "S": 3, "stride": 2, "padding": 1})
    x, w = random_inputs(dw, p, "float32")
    naive = np.concatenate([_naive_conv(x[:, c:c + 1], w[c:c + 1], 2, 1, 1) for c in range(5)], axis=1)
    assert check_output(dw.reference(p, [x, w]), naive, 9) is None
    gc = OPS["group_conv2d"]  # 3 groups of 2 input and 4 output channels
    p = gc.complete({"N": 2, "C": 6, "H": 9, "W": 8, "K": 12, "R": 3, "S": 3, "groups": 3, "stride": 2, "padding": 1,
                     "dilation": 2})
    x, w = random_inputs(gc, p, "float32")
    naive = np.concatenate([_naive_conv(x[:, 2 * g:2 * g + 2], w[4 * g:4 * g + 4], 2, 1, 2) for g in range(3)], axis=1)
    assert check_output(gc.reference(p, [x, w]), naive, 18) is None
    assert make_task("group_conv2d", "C=6,H=9,W=8,K=12,R=3,S=3,groups=3").flops == 2 * 12 * 7 * 6 * 2 * 9


def test_group_conv2d_shapes_must_divide():
    with pytest.raises(AutotuneError, match="impossible shape for group_conv2d: groups=4 does not divide C=6"):
        make_task("group_conv2d", "C=6,H=8,W=8,K=8,R=3,S=3,groups=4")
    with pytest.raises(AutotuneError, match="groups=3 does not divide K=8"):
        make_task("group_conv2d", "C=6,H=8,W=8,K=8,R=3,S=3,groups=3")


def test_flops_and_check_output():
    assert make_task("matmul", "M=2,N=3,K=4").flops == 48
    assert make_task("conv2d", "C=64,H=56,W=56,K=64,R=3,S=3,padding=1").flops == 2 * 64 * 56 * 56 * 64 * 9
    ref = np.ones((4, 4))
    assert check_output(ref.astype("float32"), ref, 16) is None
    assert "max abs error" in check_output(ref.astype("float32") + 0.01, ref, 16)
    assert "NaN" in check_output(np.full((4, 4), np.nan, "float32"), ref, 16)
