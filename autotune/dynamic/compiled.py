"""The cover of a run-time size by uKernels, compiled into one TIR function (no Python at run time).

    func = dispatch_func(spec, [(height, scheduled PrimFunc), ...])
    table = plan_table(planner)        # an int32 array passed to the function (a constant in a model)

The function takes the sliced inputs with a symbolic leading size m, each uKernel's fixed operands (as that
uKernel takes them: relaid where its template relays them), the plan table and the output. For each uKernel
it runs the uKernel's scheduled body over its whole pieces, each on a view of the rows (a buffer declared at
the rows' address: no copy), then the padded tail piece, if the plan has one, through a scratch buffer (the
valid rows copied in, zeros after them; the valid rows copied out). So the module exports like a static one.

The plan table holds the planner's plan of every size up to `TABLE_ROWS` (row m: how many whole pieces of
each uKernel, the tail's uKernel, the tail's rows). A larger m first takes as many pieces of the tallest
uKernel as bring it within the table, then the table's plan of the rest (`plan_of`, the same rule in Python).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .compose import Planner

TABLE_ROWS = 4096  # sizes the plan table holds (80 kB for three uKernels)


@dataclass(frozen=True)
class Cover:
    """How size m is computed: whole pieces per uKernel (in the planner's order), then one padded tail piece."""

    counts: tuple[int, ...]
    tail_kernel: int
    tail_rows: int  # 0: no tail


def plan_table(planner: Planner, top: int) -> np.ndarray:
    """[rows + 1, kernels + 2] int32: row m = whole pieces of each uKernel, tail uKernel, tail rows (m <= top,
    at most TABLE_ROWS; the tallest uKernel's height more, so that every larger size reaches into it)."""
    n = len(planner.heights)
    rows = min(top, TABLE_ROWS) + max(planner.heights)
    table = np.zeros((rows + 1, n + 2), "int32")
    for m in range(1, rows + 1):
        for piece in planner.plan(m).pieces:
            if piece.padded:
                table[m, n], table[m, n + 1] = piece.kernel, piece.rows
            else:
                table[m, piece.kernel] += 1
    return table


def _extra_tallest(table_rows: int, tallest: int, m: Any) -> Any:
    """Pieces of the tallest uKernel taken before the table's plan (0 within the table): m - extra * tallest
    lands in the table's last `tallest` rows. Python ints or TIR expressions."""
    top = table_rows - 1
    over = m - top
    return (over + tallest - 1) // tallest if isinstance(m, int) else _tir_extra(over, tallest)


def _tir_extra(over: Any, tallest: int) -> Any:
    from tvm import tirx

    return tirx.Max(tirx.floordiv(over + (tallest - 1), tallest), tirx.IntImm("int64", 0))


def plan_of(table: np.ndarray, heights: Sequence[int], m: int) -> Cover:
    """The cover of size m the compiled function uses (the table's, with the tallest uKernel repeated above it)."""
    tallest = int(np.argmax(heights))
    extra = max(0, _extra_tallest(table.shape[0], heights[tallest], m))
    row = table[m - extra * heights[tallest]]
    n = len(heights)
    counts = [int(c) for c in row[:n]]
    counts[tallest] += extra
    return Cover(tuple(counts), int(row[n]), int(row[n + 1]))


@dataclass(frozen=True)
class DispatchParams:
    """The compiled function's parameters, in order: sliced inputs, per uKernel its fixed operands, the plan
    table, the output. `fixed[k]` lists (input index, buffer) of uKernel k."""

    sliced: tuple[Any, ...]
    fixed: tuple[tuple[tuple[int, Any], ...], ...]
    table: Any
    output: Any

    def all(self) -> list[Any]:
        return [*self.sliced, *(b for f in self.fixed for _, b in f), self.table, self.output]


def dispatch_func(sliced: Sequence[bool], ukernels: Sequence[tuple[int, Any]], table_rows: int,
                  name: str = "dispatch") -> tuple[Any, DispatchParams]:
    """One PrimFunc computing any size with the uKernels (height, scheduled PrimFunc whose parameters are the
    inputs then the output): `sliced[i]` says whether input i is cut along axis 0 with the output."""
    import tvm
    from tvm import tirx
    from tvm.s_tir import renew_defs

    funcs = [(h, renew_defs(f)) for h, f in ukernels]
    first = funcs[0][1]
    n_in = len(sliced)
    m = tirx.Var("m", "int64")

    def i64(v: Any) -> Any:
        return tirx.Cast("int64", v) if not isinstance(v, int) else tirx.IntImm("int64", v)

    def row_shape(buf: Any) -> list[int]:
        return [int(d) for d in buf.shape[1:]]

    outer_in = [tirx.decl_buffer([m, *row_shape(first.params[i])], first.params[i].dtype, f"in{i}")
                for i in range(n_in) if sliced[i]]
    outer_out = tirx.decl_buffer([m, *row_shape(first.params[-1])], first.params[-1].dtype, "out")
    table = tirx.decl_buffer((table_rows, len(funcs) + 2), "int32", "plan")
    fixed = tuple(tuple((i, f.params[i]) for i in range(n_in) if not sliced[i]) for _, f in funcs)
    params = DispatchParams(tuple(outer_in), fixed, table, outer_out)

    heights = [h for h, _ in funcs]
    tallest = int(np.argmax(heights))
    extra = tirx.Var("extra", "int64")
    rest = tirx.Var("rest", "int64")  # the size the table covers
    stmts: list[Any] = [tirx.Bind(extra, _extra_tallest(table_rows, heights[tallest], m)),
                        tirx.Bind(rest, m - extra * heights[tallest])]
    counts = []
    for k in range(len(funcs)):
        c = tirx.Var(f"count{k}", "int64")
        value = i64(table[rest, k]) + (extra if k == tallest else 0)
        stmts.append(tirx.Bind(c, value))
        counts.append(c)
    tail_kernel, tail_rows = tirx.Var("tail_kernel", "int64"), tirx.Var("tail_rows", "int64")
    stmts += [tirx.Bind(tail_kernel, i64(table[rest, len(funcs)])),
              tirx.Bind(tail_rows, i64(table[rest, len(funcs) + 1]))]
    whole = sum((counts[k] * heights[k] for k in range(len(funcs))), i64(0))

    outer = [*outer_in, outer_out]
    for k, (h, f) in enumerate(funcs):
        # whole pieces: the uKernel's buffers declared on the rows they compute
        start = sum((counts[j] * heights[j] for j in range(k)), i64(0))
        p = tirx.Var(f"piece{k}", "int64")
        stmts.append(tirx.For(p, i64(0), counts[k], tirx.ForKind.SERIAL,
                              _on_rows(f, sliced, outer, start + p * h)))
        # the tail, where m >= h: the uKernel on the last h rows (rows before the tail computed again, alike)
        overlap = _on_rows(renew_defs(f), sliced, outer, m - h, original=f)
        # where m < h: on its own buffers, allocated; the valid rows copied in (zeros after them) and out
        g = renew_defs(f)
        rows_in = [g.params[i] for i in range(n_in) if sliced[i]]
        scratch = [tirx.AllocBuffer(b) for b in [*rows_in, g.params[-1]]] + _fixed_as(g, f, sliced)
        scratch += [_copy_rows(o, b, whole, tail_rows, into_scratch=True) for o, b in zip(outer_in, rows_in)]
        scratch += [g.body, _copy_rows(outer_out, g.params[-1], whole, tail_rows, into_scratch=False)]
        tail = tirx.IfThenElse(m >= h, overlap, tirx.SeqStmt(scratch))
        stmts.append(tirx.IfThenElse(tirx.And(tail_rows > 0, tail_kernel == k), tail, None))
    attrs = {**dict(first.attrs or {}), "global_symbol": name, "tirx.is_scheduled": True}
    func = tirx.PrimFunc(params.all(), tirx.SeqStmt(stmts))
    func = func.with_attrs(tvm.ir.make_node("ir.DictAttrs", **attrs))
    return func, params


def _on_rows(func: Any, sliced: Sequence[bool], outer: Sequence[Any], row0: Any, original: Any = None) -> Any:
    """The uKernel's body on rows [row0, row0 + height) of the outer buffers: its row buffers declared at those
    rows' address (a view, no copy). Its fixed operands are the dispatch function's parameters: the `original`'s
    buffers, where `func` is a copy of it."""
    from tvm import tirx

    rows = [func.params[i] for i, s in enumerate(sliced) if s] + [func.params[-1]]
    views = [tirx.DeclBuffer(b, data=tirx.address_of(o[(row0,) + (0,) * (len(o.shape) - 1)]))
             for b, o in zip(rows, outer)]
    return tirx.SeqStmt([*views, *_fixed_as(func, original, sliced), func.body])


def _fixed_as(func: Any, original: Any, sliced: Sequence[bool]) -> list[Any]:
    """A copy's fixed operands declared on the original's (none when there is no copy)."""
    from tvm import tirx

    if original is None:
        return []
    return [tirx.DeclBuffer(func.params[i], data=tirx.buffer_data(original.params[i]))
            for i, s in enumerate(sliced) if not s]


def _copy_rows(outer: Any, scratch: Any, row0: Any, rows: Any, into_scratch: bool) -> Any:
    """Rows [row0, row0 + rows) of `outer` into the scratch's first rows (zeros after them), or back out: loops
    over every axis of both, so that the scratch is only ever accessed as itself (no alias for the storage
    planner to miss)."""
    from tvm import tirx

    zero = tirx.IntImm("int64", 0)
    r = tirx.Var("r", "int64")
    inner = [tirx.Var(f"i{d}", "int64") for d in range(1, len(scratch.shape))]
    if into_scratch:
        value = tirx.if_then_else(r < rows, outer[(row0 + r, *inner)], tirx.const(0, scratch.dtype))
        body, extent = tirx.BufferStore(scratch, value, [r, *inner]), tirx.IntImm("int64", int(scratch.shape[0]))
    else:
        body, extent = tirx.BufferStore(outer, scratch[(r, *inner)], [row0 + r, *inner]), rows
    for var, size in reversed(list(zip(inner, scratch.shape[1:]))):
        body = tirx.For(var, zero, tirx.IntImm("int64", int(size)), tirx.ForKind.SERIAL, body)
    return tirx.For(r, zero, extent, tirx.ForKind.SERIAL, body)
