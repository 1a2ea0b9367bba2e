"""The operator registry is the one definition of each operator, and templates carry what autotune needs of them:
every operator has every field, a template's preferences and GPU resources are reached through the template,
no knob name appears outside the template modules, and autotune never imports search_spaces."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from pathlib import Path

import pytest

from autotune.errors import AutotuneError
from autotune.fingerprint import PROBE_TARGETS
from autotune.gpu_limits import KernelResources, check_config
from autotune.model.default_schedule import heuristic_configs
from autotune.operators import (OPS, default_template_ref, default_template_refs, get_op, random_inputs,
                                ukernel_template_ref)
from autotune.task import make_task
from autotune.templates import Template, default_template, resolve, space_of
from tests.toy_template import TOY_MATMUL

ROOT = Path(__file__).resolve().parents[1]
# A digest of every operator's probe shapes: changing one changes the version of every template of the operator,
# and every log made with them goes stale.
PROBE_DIGEST = "c2057ecb3801"


@pytest.mark.parametrize("name", list(OPS))
def test_every_operator_is_defined_in_full(name):
    op = get_op(name)
    assert op.name == name and op.doc and op.params
    example = make_task(name, op.example)  # a complete, possible shape
    assert example.flops > 0
    assert len(op.probe_shapes) == 2
    for shape in op.probe_shapes:
        small = make_task(name, shape)
        inputs = random_inputs(op, small.shape, small.dtype)
        assert [a.shape for a in inputs] == op.input_shapes(small.shape)
        assert op.reference(small.shape, inputs).shape == tuple(op.output_shape(small.shape))
    assert set(op.templates) == {"llvm", "cuda"}
    for kind, ref in [*op.templates.items(), *op.ukernel_templates.items()]:
        template = resolve(ref)
        assert (template.op, template.target_kind) == (name, kind)
        assert (template.kernel_resources is not None) == (kind == "cuda")
    if op.row_split is not None:
        assert op.row_split.param in op.params and len(op.row_split.sliced) == len(op.input_shapes(example.shape))


def test_probe_shapes_are_the_ones_templates_are_fingerprinted_on():
    shapes = repr({name: op.probe_shapes for name, op in OPS.items()})
    assert hashlib.sha1(shapes.encode()).hexdigest()[:12] == PROBE_DIGEST
    assert set(PROBE_TARGETS) == {kind for op in OPS.values() for kind in op.templates}


def test_template_lookups_name_what_exists():
    assert default_template_ref("matmul", "llvm") == "search_spaces.matmul:MATMUL_CPU"
    assert ukernel_template_ref("matmul", "llvm") == "search_spaces.matmul:MATMUL_UKERNEL_CPU"
    assert ukernel_template_ref("dense", "llvm") == default_template_ref("dense", "llvm")  # no uKernel of its own
    assert len(default_template_refs()) == 2 * len(OPS)
    with pytest.raises(AutotuneError, match="no rocm template for conv2d yet"):
        default_template_ref("conv2d", "rocm")
    with pytest.raises(AutotuneError, match="unknown operator 'softmax'"):
        get_op("softmax")
    task = make_task("dense", {"batch": 4, "in_features": 8, "out_features": 16})
    assert default_template(task) is resolve("search_spaces.matmul:DENSE_CPU")


def test_resolve_and_space_of_are_computed_once():
    ref = "search_spaces.conv2d:CONV2D_CPU"
    assert resolve(ref) is resolve(ref)
    shape = {"C": 16, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "padding": 1}
    space = space_of(resolve(ref), make_task("conv2d", shape))
    assert space_of(resolve(ref), make_task("conv2d", shape)) is space  # an equal task, made again
    with pytest.raises(AutotuneError, match="cannot load template"):
        resolve("search_spaces.matmul:NO_SUCH_TEMPLATE")


def test_search_spaces_keeps_its_names():
    import search_spaces
    from search_spaces import base

    assert search_spaces.resolve is resolve and search_spaces.space_of is space_of
    assert base.Template is Template and search_spaces.Template is Template
    assert search_spaces.default_template_ref("conv2d", "cuda") == default_template_ref("conv2d", "cuda")


def _too_wide(task, cfg) -> KernelResources:
    return KernelResources(block=(2048, 1, 1), grid=(1, 1, 1), shared_bytes=0, registers=32)


def test_gpu_limits_are_read_from_the_templates_field():
    """A template's resource estimate is its declared field (this test module has no `kernel_resources`)."""
    task = make_task("matmul", {"M": 64, "N": 64, "K": 64}, target="cuda", arch="sm_90")
    cuda_toy = dataclasses.replace(TOY_MATMUL, target_kind="cuda")
    cfg = space_of(cuda_toy, task).get(0)
    assert check_config(task, cuda_toy, cfg) is None  # no estimate: never rejected
    limited = dataclasses.replace(cuda_toy, kernel_resources=_too_wide)
    assert check_config(task, limited, cfg) == "2048 threads per block > 1024"
    cpu = make_task("matmul", {"M": 64, "N": 64, "K": 64})
    assert check_config(cpu, limited, cfg) is None  # CPU targets have no such limits


def _toy_preferences(task):
    return {"tile_j": (8,), "vectorize": "inner", "unroll": 16, "no_such_knob": 3}


def test_untuned_builds_take_the_templates_preferences():
    task = make_task("matmul", {"M": 64, "N": 64, "K": 64})
    preferring = dataclasses.replace(TOY_MATMUL, preferences=_toy_preferences)
    first = heuristic_configs(preferring, task)[0]
    assert (first["tile_j"][-1], first["vectorize"], first["unroll"]) == (8, "inner", 16)
    assert first["parallel"] == "none"  # no preference: the first candidate
    assert first["tile_i"][-1] == 16 and first["tile_k"][-1] == 16  # a split without one: one vector's lanes
    plain = heuristic_configs(TOY_MATMUL, task)[0]
    assert (plain["tile_j"][-1], plain["vectorize"], plain["unroll"]) == (16, "none", 0)


def _knob_names() -> set[str]:
    names = set()
    for (op, kind), ref in default_template_refs().items():
        task = make_task(op, get_op(op).example, target=PROBE_TARGETS[kind][0])
        names |= {knob.name for knob in space_of(resolve(ref), task).knobs}
    return names


def _sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_knob_name_outside_the_template_modules():
    """What a knob means is its template's business: autotune and the cost models never name one. (Single words
    such as "pad" or "fetch" also name other things, so only compound names are looked for.)"""
    names = {n for n in _knob_names() if "_" in n}
    assert {"tile_i", "pack_b", "vec_axis", "fetch_vec"} <= names
    found = [(str(path.relative_to(ROOT)), node.value) for path in _sources("autotune", "cost_models")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in names]
    assert found == []


def test_autotune_never_imports_search_spaces():
    """search_spaces depends on autotune, never the reverse: templates are reached through references."""
    found = []
    for path in _sources("autotune", "cost_models"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(str(path.relative_to(ROOT)), m) for m in modules if m.split(".")[0] == "search_spaces"]
    assert found == []


def test_autotune_ops_lists_every_operator_with_its_example_and_templates(capsys):
    from autotune.cli import main

    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for name, op in OPS.items():
        assert f"{name}: {op.doc}" in out
        for kind, ref in op.templates.items():
            assert f"  {kind} template {ref}: " in out and f"for {op.example}\n" in out

