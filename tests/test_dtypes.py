"""Element types other than float32: tasks, references and tolerances, and the GEMM and conv2d templates' kernels
(AMX and the dot-product paths where the host has the instruction, the widened fp32 path on any x86 CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import UNHURRIED

from autotune.errors import AutotuneError
from autotune.operators import check_output, element_type, random_inputs, reference_output
from autotune.target import cpu_features, parse_target
from autotune.task import Task, make_task
from autotune.templates import default_template, space_of

from tests.test_search_spaces import _is_legal as is_legal
from tests.test_search_spaces import _run as run_config

HOST = parse_target("llvm")
HAS = cpu_features(HOST)
HASWELL = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}  # no dot-product instruction: the widened path
COOPERLAKE = {"kind": "llvm", "mcpu": "cooperlake", "num-cores": 2}  # VNNI and AVX-512 BF16, no AMX


def test_dtype_is_part_of_the_task_and_its_key() -> None:
    f32, i8 = (make_task("dense", "batch=4,in_features=8,out_features=16", d) for d in ("float32", "int8"))
    assert f32.key != i8.key and str(i8).endswith("int8 llvm")
    assert Task.from_dict(json.loads(json.dumps(i8.to_dict()))) == i8  # as a record stores it
    assert i8.element.output == "int32" and make_task("matmul", "M=2,N=16,K=4", "bfloat16").element.output == "bfloat16"


@pytest.mark.parametrize("op,shape,dtype,needle", [
    ("matmul", "M=2,N=2,K=2", "float64", "unsupported dtype 'float64'; choose one of: float32, bfloat16, float16, "
                                         "int8"),
    ("matmul", "M=2,N=2,K=2", "float16", "no float16 template for matmul on llvm yet (float16 on llvm: none)"),
    ("depthwise_conv2d", "C=8,H=8,W=8,R=3,S=3", "float16", "no float16 template for depthwise_conv2d on llvm yet "
                                                           "(float16 on llvm: none)"),
    ("batch_matmul", "B=2,M=2,N=2,K=2", "bfloat16", "no bfloat16 template for batch_matmul on llvm yet"),
])
def test_a_dtype_without_a_template_is_a_one_line_error(op, shape, dtype, needle) -> None:
    with pytest.raises(AutotuneError, match="^" + needle.replace("(", r"\(").replace(")", r"\)")) as err:
        make_task(op, shape, dtype)
    assert "\n" not in str(err.value)


def test_references_and_tolerances_catch_a_wrong_kernel() -> None:
    task = make_task("dense", "batch=8,in_features=64,out_features=32", "int8")
    x, w = random_inputs(task.opdef, task.shape, "int8")
    assert x.dtype == np.int8 and x.min() < -100 and x.max() > 100  # the whole int8 range
    ref = reference_output(task.opdef, task.shape, "int8", [x, w])
    exact = (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    assert check_output(exact, ref, 64, "int8") is None
    off = exact.copy()
    off[3, 5] += 1
    assert "1 of 256 outputs differ" in check_output(off, ref, 64, "int8")

    task = make_task("dense", "batch=8,in_features=64,out_features=32", "bfloat16")
    x, w = random_inputs(task.opdef, task.shape, "bfloat16")
    ref = reference_output(task.opdef, task.shape, "bfloat16", [x, w])
    kind = element_type("bfloat16")
    rounded = ref.astype(np.float32).astype(kind.numpy_output)  # what an exact kernel gives after rounding
    assert check_output(rounded, ref, 64, "bfloat16") is None
    short = (x[:, :-2].astype(np.float32) @ w[:, :-2].astype(np.float32).T).astype(kind.numpy_output)  # a k dropped
    assert "max abs error" in check_output(short, ref, 64, "bfloat16")


def _instruction(task):
    """The instruction the task's template uses (None: inputs widened)."""
    from search_spaces.conv2d import _path
    from search_spaces.gemm_dot import instruction
    from search_spaces.matmul import GEMMS

    return _path(task)[0] if task.op == "conv2d" else instruction(GEMMS[task.op], task)


def _check_configs(task, n: int, feature: str | None) -> None:
    """The task uses the instruction of `feature` (None: none, inputs widened); its untuned config and `n` random
    ones match the reference."""
    from autotune.model.default_schedule import heuristic_configs

    ins = _instruction(task) if task.op in ("conv2d", "matmul", "dense") else None
    assert (ins.feature if ins else None) == feature
    template = default_template(task)
    space = space_of(template, task)
    rng = np.random.default_rng(7)
    untuned = heuristic_configs(template, task, count=1)[0].index
    legal = [i for i in space.sample(rng, 4 * n, exclude={untuned}) if is_legal(space.get(i))][:n]
    for index in [untuned, *legal]:
        cfg = space.get(index)
        assert run_config(task, None, template, cfg) is None, cfg.knobs


INSTRUCTION_CASES = [  # (a target without AMX where the host may have it)
    ("dense", "batch=10,in_features=64,out_features=60", "int8", "avx512vnni", HOST),  # M and N padded
    ("matmul", "M=16,N=48,K=36", "int8", "avx512vnni", HOST),
    ("dense", "batch=8,in_features=34,out_features=32", "bfloat16", "avx512bf16", HOST),
    ("matmul", "M=20,N=48,K=34", "bfloat16", "avx512bf16", COOPERLAKE),  # B packed and A padded as bf16 bits
    ("dense", "batch=64,in_features=128,out_features=96", "int8", "amx-int8", HOST),
    ("matmul", "M=62,N=64,K=192", "int8", "amx-int8", HOST),  # M padded to whole 32-row blocks
    ("dense", "batch=64,in_features=64,out_features=64", "bfloat16", "amx-bf16", HOST),
    ("matmul", "M=62,N=64,K=96", "bfloat16", "amx-bf16", HOST),  # bits, as on the dot path
    ("conv2d", "C=64,H=9,W=9,K=64,R=3,S=3,padding=1", "int8", "amx-int8", HOST),
    ("conv2d", "N=2,C=60,H=7,W=10,K=60,R=3,S=3,padding=2,dilation=2", "int8", "amx-int8", HOST),  # K, C padded
    ("conv2d", "C=32,H=10,W=7,K=40,R=1,S=1", "bfloat16", "amx-bf16", HOST),  # 1x1; K to 64, pixels to 96
    ("conv2d", "N=2,C=64,H=6,W=5,K=32,R=3,S=3,padding=1", "bfloat16", "amx-bf16", HOST),
    ("conv2d", "N=2,C=64,H=15,W=13,K=48,R=3,S=3,stride=2,padding=1", "int8", "amx-int8", HOST),  # 4 phases
    ("conv2d", "C=32,H=11,W=11,K=32,R=5,S=5,stride=2,padding=2", "bfloat16", "amx-bf16", HOST),
    ("conv2d", "C=64,H=14,W=14,K=64,R=1,S=1,stride=2", "bfloat16", "amx-bf16", HOST),  # one phase
    ("conv2d", "N=2,C=60,H=9,W=11,K=48,R=3,S=3,stride=2,padding=1", "int8", "avx512vnni", COOPERLAKE),
    ("conv2d", "C=32,H=10,W=7,K=32,R=1,S=1", "int8", "avx512vnni", COOPERLAKE),
]


@pytest.mark.parametrize("op,shape,dtype,feature,target", INSTRUCTION_CASES)
def test_instruction_kernels_match_the_reference(op, shape, dtype, feature, target) -> None:
    if feature not in HAS or "avx512f" not in HAS:
        pytest.skip(f"this CPU has no {feature}")
    _check_configs(make_task(op, shape, dtype, target=target), 3, feature)


@pytest.mark.parametrize("op,shape,dtype", [
    ("matmul", "M=5,N=24,K=7", "int8"),  # K not a whole number of VNNI groups: widened on any CPU
    ("dense", "batch=3,in_features=8,out_features=40", "int8"),  # N not whole instructions within MAX_PAD
    ("dense", "batch=6,in_features=16,out_features=20", "bfloat16"),  # (on haswell)
    ("conv2d", "C=32,H=9,W=9,K=32,R=3,S=3,stride=2,padding=2,dilation=2", "int8"),  # not on the AMX path
    ("conv2d", "C=8,H=6,W=6,K=16,R=3,S=3,padding=1", "bfloat16"),
    ("group_conv2d", "C=16,H=6,W=6,K=16,R=3,S=3,groups=4,padding=1", "int8"),
    ("depthwise_conv2d", "C=32,H=10,W=10,R=5,S=5,padding=2", "bfloat16"),  # rounded as its tiles are written back
    ("depthwise_conv2d", "N=2,C=24,H=9,W=9,R=3,S=3,stride=2,padding=1", "int8"),
])
def test_without_the_instruction_inputs_are_widened(op, shape, dtype) -> None:
    _check_configs(make_task(op, shape, dtype, target=HASWELL if dtype == "bfloat16" else HOST), 2, None)


def test_int8_dense_tunes_end_to_end(tmp_path) -> None:
    from autotune.records import load_records
    from autotune.tune import tune

    task = make_task("dense", "batch=8,in_features=64,out_features=32", "int8")
    result = tune(task, trials=4, log=tmp_path / "int8.jsonl", retime=0, runner_options=UNHURRIED)
    records = load_records(tmp_path / "int8.jsonl")
    assert len(records) == 4 and all(r.task == task for r in records)
    assert result.best is not None and result.best.result.ok  # every kernel was checked against the reference
    assert all(r.result.ok for r in records)
