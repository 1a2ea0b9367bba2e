"""Templates for tests: a tiny matmul template, and one whose configs are deliberately broken."""

from __future__ import annotations

from tvm import s_tir, te

from autotune.space import ConfigSpace, choice_knob, split_knob
from autotune.task import Task
from autotune.templates import Template, prim_func


def _tiny_space(task: Task) -> ConfigSpace:
    p = task.shape
    return ConfigSpace((split_knob("tile_i", p["M"], 2), split_knob("tile_j", p["N"], 2)))


def _tiny_apply(task: Task, cfg) -> s_tir.Schedule:
    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, list(cfg["tile_i"]))
    j0, j1 = sch.split(j, list(cfg["tile_j"]))
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    return sch


TINY_MATMUL = Template("tests.tiny_matmul", "matmul", "llvm", _tiny_space, _tiny_apply)

MODES = ("ok", "wrong", "hang", "crash", "invalid")


def _buggy_space(task: Task) -> ConfigSpace:
    return ConfigSpace((choice_knob("mode", MODES), split_knob("tile_j", task.shape["N"], 2)))


def _buggy_apply(task: Task, cfg) -> s_tir.Schedule:
    mode = cfg["mode"]
    if mode == "invalid":
        raise ValueError("this config is illegal")
    M, N, K = (task.shape[x] for x in "MNK")
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    if mode == "hang":  # a reduction of 2^40 terms: it never finishes in a test's lifetime
        k = te.reduce_axis((0, 1 << 40), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, (k % K).astype("int32")] * B[0, j], axis=k), name="C")
    elif mode == "crash":  # reads gigabytes out of bounds: SIGSEGV
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i + (1 << 24), k] * B[k, j], axis=k), name="C")
    else:
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        if mode == "wrong":
            C = te.compute((M, N), lambda i, j: C[i, j] + 1.0, name="C_off")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    _, j, *_ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, list(cfg["tile_j"]))
    return sch


BUGGY_MATMUL = Template("tests.buggy_matmul", "matmul", "llvm", _buggy_space, _buggy_apply)
