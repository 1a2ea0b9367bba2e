"""Small templates for cost-model and tuner tests: a tiled matmul and a tiled conv2d."""

from __future__ import annotations

from tvm import s_tir

from autotune.space import Config, ConfigSpace, annotate_knob, choice_knob, split_knob
from autotune.task import Task
from autotune.templates import Template, prim_func

MAX_VECTOR = 64  # wider vectorised loops are rejected, so some configs are illegal


def _matmul_space(task: Task) -> ConfigSpace:
    p = task.shape
    return ConfigSpace((
        split_knob("tile_i", p["M"], 2),
        split_knob("tile_j", p["N"], 2),
        split_knob("tile_k", p["K"], 2),
        annotate_knob("parallel", ("none", "outer")),
        annotate_knob("vectorize", ("none", "inner")),
        choice_knob("unroll", (0, 16, 64)),
    ))


def _matmul_apply(task: Task, cfg: Config) -> s_tir.Schedule:
    if cfg["vectorize"] == "inner" and cfg["tile_j"][1] > MAX_VECTOR:
        raise ValueError(f"vector of {cfg['tile_j'][1]} lanes is too wide")
    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, list(cfg["tile_i"]))
    j0, j1 = sch.split(j, list(cfg["tile_j"]))
    k0, k1 = sch.split(k, list(cfg["tile_k"]))
    sch.reorder(i0, j0, k0, i1, k1, j1)
    if cfg["parallel"] == "outer":
        sch.parallel(i0)
    if cfg["vectorize"] == "inner":
        sch.vectorize(j1)
    if cfg["unroll"]:
        sch.annotate(i0, "pragma_auto_unroll_max_step", cfg["unroll"])
    return sch


def _conv2d_space(task: Task) -> ConfigSpace:
    p = task.shape
    return ConfigSpace((
        split_knob("tile_k", p["K"], 2),
        split_knob("tile_x", p["W"] + 2 * p["padding"] - p["S"] + 1, 2),
        annotate_knob("parallel", ("none", "outer")),
        annotate_knob("vectorize", ("none", "inner")),
    ))


def _conv2d_apply(task: Task, cfg: Config) -> s_tir.Schedule:
    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("conv")
    n, k, y, x, c, r, s = sch.get_loops(blk)
    k0, k1 = sch.split(k, list(cfg["tile_k"]))
    x0, x1 = sch.split(x, list(cfg["tile_x"]))
    sch.reorder(n, k0, y, x0, c, r, s, k1, x1)
    if cfg["parallel"] == "outer":
        sch.parallel(sch.fuse(n, k0))
    if cfg["vectorize"] == "inner":
        sch.vectorize(x1)
    if task.shape["padding"]:
        sch.compute_inline(sch.get_sblock("pad"))
    return sch


def _matmul_twins_space(task: Task) -> ConfigSpace:
    """The toy matmul space plus a knob the schedule ignores: every config has a twin with the same TIR."""
    return ConfigSpace((*_matmul_space(task).knobs, choice_knob("noop", (0, 1))))


TOY_MATMUL = Template("tests.toy_matmul", "matmul", "llvm", _matmul_space, _matmul_apply)
TOY_MATMUL_TWINS = Template("tests.toy_matmul_twins", "matmul", "llvm", _matmul_twins_space, _matmul_apply)
TOY_CONV2D = Template("tests.toy_conv2d", "conv2d", "llvm", _conv2d_space, _conv2d_apply)

TOY_MATMUL_REF = "tests.toy_template:TOY_MATMUL"
TOY_CONV2D_REF = "tests.toy_template:TOY_CONV2D"
TOY_MATMUL_TWINS_REF = "tests.toy_template:TOY_MATMUL_TWINS"


def toy_matmul_cost(task: Task, cfg: Config) -> float | None:
    """A fake measurement (seconds) of a TOY_MATMUL config: a smooth bowl in the log tile sizes; None if illegal."""
    import math

    if cfg["vectorize"] == "inner" and cfg["tile_j"][1] > MAX_VECTOR:
        return None
    c = 1 + (math.log2(cfg["tile_i"][1]) - 3) ** 2 + 0.5 * (math.log2(cfg["tile_j"][1]) - 4) ** 2
    c += 0.3 * (math.log2(cfg["tile_k"][1]) - 2) ** 2
    c *= (0.5 if cfg["parallel"] == "outer" else 1.0) * (0.6 if cfg["vectorize"] == "inner" else 1.0)
    c *= 1.0 - 0.1 * (0, 16, 64).index(cfg["unroll"])
    return c * task.flops * 1e-11
