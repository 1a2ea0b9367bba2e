"""The cover of a run-time size by uKernels, compiled into one TIR function (no Python at run time).

    table = plan_table(planner, top)   # an int32 array passed to the function (a constant in a model)
    func, params = dispatch_func(sliced, [(height, scheduled PrimFunc), ...], table)

The function takes the sliced inputs with a symbolic leading size m, each uKernel's fixed operands (as that
uKernel takes them: relaid where its template relays them; one parameter for an operand the uKernels take as it
is), the plan table and the output. For each uKernel
it runs the uKernel's scheduled body over its whole pieces, each on a view of the rows (a buffer declared at
the rows' address: no copy), then the padded tail piece, if the plan has one, through a scratch buffer (the
valid rows copied in, zeros after them; the valid rows copied out). So the module exports like a static one.

The plan table holds the planner's plan of every size up to `TABLE_ROWS` (row m: how many whole pieces of
each uKernel, the tail's uKernel, the tail's rows). A larger m first takes as many pieces of the tallest
uKernel as bring it within the table, then the table's plan of the rest (`compose.extra_tallest`, the planner's
rule too; `plan_of` is the compiled cover in Python).

On a GPU (`gpu=True`) the host reads no table: device memory is not the host's. The table is cut to its
shortest prefix after which every plan repeats the one a tallest piece before it (`periodic_rows`), and each
column becomes a sum of comparisons compiled into the host code (`lookup`). Every uKernel's whole
pieces are one launch of its kernel, the piece number its blockIdx.z; the tail is a launch of its own, and
the scratch copies are kernels too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .compose import PLANNED_ROWS, Planner, extra_tallest

TABLE_ROWS = PLANNED_ROWS  # sizes the plan table holds (80 kB for three uKernels): the ones the planner plans


@dataclass(frozen=True)
class Cover:
    """How size m is computed: whole pieces per uKernel (in the planner's order), then one padded tail piece."""

    counts: tuple[int, ...]
    tail_kernel: int
    tail_rows: int  # 0: no tail


def build_context(gpu: bool) -> Any:
    """The pass context to compile a module with dynamic kernels in. On a GPU: the current one without TVM's common
    subexpression elimination, which, over a cover with more pieces of the tallest uKernel than the table holds,
    binds a subexpression where one guarded launch reads it and another uses it ("used, but not passed in as API
    arguments"); nvcc eliminates common subexpressions of the kernels itself. On a CPU: the current one as it is."""
    import contextlib

    import tvm

    if not gpu:
        return contextlib.nullcontext()
    outer = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=outer.opt_level,
                                     config={**dict(outer.config), "tirx.disable_cse_tir": True})


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


def _tir_extra_tallest(table_rows: int, tallest: int, m: Any) -> Any:
    """`compose.extra_tallest` of a TIR size, the table's last row its top."""
    from tvm import tirx

    return tirx.Max(tirx.floordiv(m - (table_rows - 1) + (tallest - 1), tallest), tirx.IntImm("int64", 0))


def periodic_rows(table: np.ndarray, heights: Sequence[int]) -> int:
    """The fewest rows of `table` from which on `plan_of` gives the same covers: from that row on, each row is
    the one a tallest uKernel's height before it with one more piece of the tallest."""
    tallest = int(np.argmax(heights))
    h = heights[tallest]
    step = np.zeros(table.shape[1], table.dtype)
    step[tallest] = 1
    rows = table.shape[0]
    while rows - 1 >= h and np.array_equal(table[rows - 1], table[rows - 1 - h] + step):
        rows -= 1
    return max(rows, h)


def lookup(column: np.ndarray, index: Any) -> Any:
    """column[index] as a TIR expression, for code that cannot read a table: the first value plus, at each
    row where the value changes, the change times (index >= that row). A sum and not a tree of selects: TVM's
    simplifier substitutes the expression wherever its variable is used, and a tree of selects, simplified under
    each branch's condition, took it minutes."""
    from tvm import tirx

    value: Any = tirx.IntImm("int64", int(column[0]))
    for row in np.flatnonzero(np.diff(column)) + 1:
        step = int(column[row]) - int(column[row - 1])
        value = value + tirx.Cast("int64", index >= int(row)) * step
    return value


def plan_of(table: np.ndarray, heights: Sequence[int], m: int) -> Cover:
    """The cover of size m the compiled function uses (the table's, with the tallest uKernel repeated above it)."""
    tallest = int(np.argmax(heights))
    extra = extra_tallest(table.shape[0] - 1, heights[tallest], m)
    row = table[m - extra * heights[tallest]]
    n = len(heights)
    counts = [int(c) for c in row[:n]]
    counts[tallest] += extra
    return Cover(tuple(counts), int(row[n]), int(row[n + 1]))


@dataclass(frozen=True)
class DispatchParams:
    """The compiled function's parameters, in order: sliced inputs, per uKernel its fixed operands, the plan
    table, the output. `fixed[k]` lists (input index, buffer) of the fixed operands that are uKernel k's own
    parameters; `uses[k]`, for each fixed input of uKernel k in order, the position among all fixed parameters of
    the one it reads (its own, or one it shares)."""

    sliced: tuple[Any, ...]
    fixed: tuple[tuple[tuple[int, Any], ...], ...]
    table: Any
    output: Any
    uses: tuple[tuple[int, ...], ...] = ()

    def all(self) -> list[Any]:
        table = [] if self.table is None else [self.table]
        return [*self.sliced, *(b for f in self.fixed for _, b in f), *table, self.output]


class CoverVars(NamedTuple):
    """The cover of size m as TIR variables, bound by `stmts`: whole pieces per uKernel, the tail's uKernel and
    rows."""

    stmts: list[Any]
    counts: list[Any]
    tail_kernel: Any
    tail_rows: Any


def cover_of(table: np.ndarray, heights: Sequence[int], m: Any, plan: Any = None) -> CoverVars:
    """`plan_of(table, heights, m)` computed in TIR: read from `plan` (the table as a buffer parameter), or, where
    `plan` is None, from the table compiled into the code (`lookup`), the tail's rows then what the whole pieces
    leave (a column of a different value in every row would be as large as the table)."""
    from tvm import tirx

    n = len(heights)
    tallest = int(np.argmax(heights))
    extra, rest = tirx.Var("extra", "int64"), tirx.Var("rest", "int64")  # rest: the size the table covers

    def entry(col: int) -> Any:
        return lookup(table[:, col], rest) if plan is None else tirx.Cast("int64", plan[rest, col])

    stmts: list[Any] = [tirx.Bind(extra, _tir_extra_tallest(table.shape[0], heights[tallest], m)),
                        tirx.Bind(rest, m - extra * heights[tallest])]
    counts = []
    for k in range(n):
        c = tirx.Var(f"count{k}", "int64")
        stmts.append(tirx.Bind(c, entry(k) + (extra if k == tallest else 0)))
        counts.append(c)
    whole = sum((counts[k] * heights[k] for k in range(n)), tirx.IntImm("int64", 0))
    tail_kernel, tail_rows = tirx.Var("tail_kernel", "int64"), tirx.Var("tail_rows", "int64")
    stmts += [tirx.Bind(tail_kernel, entry(n)), tirx.Bind(tail_rows, m - whole if plan is None else entry(n + 1))]
    return CoverVars(stmts, counts, tail_kernel, tail_rows)


def dispatch_func(sliced: Sequence[bool], ukernels: Sequence[tuple[int, Any]], table: np.ndarray,
                  name: str = "dispatch", gpu: bool = False,
                  as_given: Sequence[Sequence[int]] | None = None) -> tuple[Any, DispatchParams]:
    """One PrimFunc computing any size with the uKernels (height, scheduled PrimFunc whose parameters are the
    inputs then the output): `sliced[i]` says whether input i is cut along axis 0 with the output. `table` is
    `plan_table`'s: a parameter of the function on the CPU, compiled into its host code on a GPU (`gpu`; then
    `DispatchParams.table` is None). `as_given[k]` lists the fixed inputs uKernel k takes as they are (not relaid):
    all uKernels that take one so share one parameter (the first's in `DispatchParams.fixed`)."""
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
    heights = [h for h, _ in funcs]
    rows = periodic_rows(table, heights) if gpu else table.shape[0]
    plan = None if gpu else tirx.decl_buffer((rows, len(funcs) + 2), "int32", "plan")
    fixed, uses, aliases = _fixed_params([f for _, f in funcs], sliced, as_given)
    params = DispatchParams(tuple(outer_in), fixed, plan, outer_out, uses)

    stmts, counts, tail_kernel, tail_rows = cover_of(table[:rows], heights, m, plan)
    stmts = [*aliases, *stmts]
    whole = sum((counts[k] * heights[k] for k in range(len(funcs))), i64(0))

    outer = [*outer_in, outer_out]
    for k, (h, f) in enumerate(funcs):
        # whole pieces: the uKernel's buffers declared on the rows they compute
        start = sum((counts[j] * heights[j] for j in range(k)), i64(0))
        stmts.append(_pieces(f, sliced, outer, start, h, counts[k], gpu))
        # the tail, where m >= h: the uKernel on the last h rows (rows before the tail computed again, alike)
        overlap = _on_rows(renew_defs(f), sliced, outer, m - h, original=f)
        # where m < h: on its own buffers, allocated; the valid rows copied in (zeros after them) and out
        g = renew_defs(f)
        rows_in = [g.params[i] for i in range(n_in) if sliced[i]]
        scratch = [tirx.AllocBuffer(b) for b in [*rows_in, g.params[-1]]] + _fixed_as(g, f, sliced)
        scratch += [_copy_rows(o, b, whole, tail_rows, True, gpu) for o, b in zip(outer_in, rows_in)]
        scratch += [g.body, _copy_rows(outer_out, g.params[-1], whole, tail_rows, False, gpu)]
        is_tail = tirx.And(tail_rows > 0, tail_kernel == k)
        stmts += [_when(tirx.And(is_tail, m >= h), overlap, gpu),
                  _when(tirx.And(is_tail, m < h), tirx.SeqStmt(scratch), gpu)]
    attrs = {**dict(first.attrs or {}), "global_symbol": name, "tirx.is_scheduled": True}
    func = tirx.PrimFunc(params.all(), tirx.SeqStmt(stmts))
    func = func.with_attrs(tvm.ir.make_node("ir.DictAttrs", **attrs))
    return func, params


def _fixed_params(funcs: Sequence[Any], sliced: Sequence[bool], as_given: Sequence[Sequence[int]] | None
                  ) -> tuple[tuple[tuple[tuple[int, Any], ...], ...], tuple[tuple[int, ...], ...], list]:
    """(per uKernel its fixed operands that are parameters, `DispatchParams.uses`, the declarations of the others
    on the parameter they share): a fixed input that uKernels take as given is one parameter, the first one's."""
    from tvm import tirx

    owners: dict[int, tuple[Any, int]] = {}  # input index -> (parameter, position among the fixed parameters)
    fixed, uses, aliases, position = [], [], [], 0
    for k, f in enumerate(funcs):
        own, reads = [], []
        for i in (i for i, s in enumerate(sliced) if not s):
            buf = f.params[i]
            shared = as_given is not None and i in as_given[k]
            owner = owners.get(i) if shared else None
            if owner is not None and list(owner[0].shape) == list(buf.shape) and owner[0].dtype == buf.dtype:
                aliases.append(tirx.DeclBuffer(buf, data=tirx.buffer_data(owner[0])))
                reads.append(owner[1])
                continue
            if shared:
                owners.setdefault(i, (buf, position))
            own.append((i, buf))
            reads.append(position)
            position += 1
        fixed.append(tuple(own))
        uses.append(tuple(reads))
    return tuple(fixed), tuple(uses), aliases


def _pieces(func: Any, sliced: Sequence[bool], outer: Sequence[Any], start: Any, height: int, count: Any,
            gpu: bool) -> Any:
    """`count` whole pieces of a uKernel from row `start` on: a loop on the CPU, one launch on a GPU (the piece
    number blockIdx.z, which the GEMM templates leave free)."""
    import tvm
    from tvm import tirx

    if not gpu:
        p = tirx.Var("piece", "int64")
        return tirx.For(p, tirx.IntImm("int64", 0), count, tirx.ForKind.SERIAL,
                        _on_rows(func, sliced, outer, start + p * height))
    p = tirx.Var("piece", "int32")
    extent = tirx.Cast("int32", count)
    body = _on_rows(func, sliced, outer, start + tirx.Cast("int64", p) * height)
    axis = tirx.IterVar(tvm.ir.Range.from_min_extent(0, extent), p, tirx.IterVar.ThreadIndex, "blockIdx.z")
    loop = tirx.For(p, tirx.IntImm("int32", 0), extent, tirx.ForKind.THREAD_BINDING, body, thread_binding=axis)
    return _when(count > 0, loop, gpu)


def _when(condition: Any, stmt: Any, gpu: bool) -> Any:
    """`stmt` where `condition` holds. On a GPU a loop run once or not at all: TVM's ThreadSync refuses a kernel
    that synchronises its threads under a condition, even one its threads all agree on."""
    from tvm import tirx

    if not gpu:
        return tirx.IfThenElse(condition, stmt, None)
    once = tirx.Var("once", "int64")
    extent = tirx.Select(condition, tirx.IntImm("int64", 1), tirx.IntImm("int64", 0))
    return tirx.For(once, tirx.IntImm("int64", 0), extent, tirx.ForKind.SERIAL, stmt)


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


def _copy_rows(outer: Any, scratch: Any, row0: Any, rows: Any, into_scratch: bool, gpu: bool = False) -> Any:
    """Rows [row0, row0 + rows) of `outer` into the scratch's first rows (zeros after them), or back out: loops
    over every axis of both, so that the scratch is only ever accessed as itself (no alias for the storage
    planner to miss). On a GPU, one kernel: an element per thread."""
    from tvm import tirx

    zero = tirx.IntImm("int64", 0)
    inner_shape = [int(d) for d in scratch.shape[1:]]
    extent = tirx.IntImm("int64", int(scratch.shape[0])) if into_scratch else rows

    def copy(r: Any, inner: Sequence[Any]) -> Any:
        if into_scratch:
            value = tirx.if_then_else(r < rows, outer[(row0 + r, *inner)], tirx.const(0, scratch.dtype))
            return tirx.BufferStore(scratch, value, [r, *inner])
        return tirx.BufferStore(outer, scratch[(r, *inner)], [row0 + r, *inner])

    if gpu:
        return _elementwise_kernel(extent, inner_shape, copy)
    r = tirx.Var("r", "int64")
    inner = [tirx.Var(f"i{d}", "int64") for d in range(1, len(scratch.shape))]
    body = copy(r, inner)
    for var, size in reversed(list(zip(inner, inner_shape))):
        body = tirx.For(var, zero, tirx.IntImm("int64", size), tirx.ForKind.SERIAL, body)
    return tirx.For(r, zero, extent, tirx.ForKind.SERIAL, body)


GPU_THREADS = 256  # threads per block of the scratch copies


def _elementwise_kernel(rows: Any, inner_shape: Sequence[int], body: Any) -> Any:
    """`body(r, inner indices)` for every r < rows and every index of `inner_shape`, one per GPU thread."""
    import tvm
    from tvm import tirx

    width = int(np.prod(inner_shape)) if inner_shape else 1
    total = rows * width
    bx, tx = tirx.Var("bx", "int32"), tirx.Var("tx", "int32")
    flat = tirx.Cast("int64", bx) * GPU_THREADS + tirx.Cast("int64", tx)
    inner, rest = [], flat
    for size in reversed(inner_shape):
        inner.insert(0, tirx.floormod(rest, size))
        rest = tirx.floordiv(rest, size)
    stmt = tirx.IfThenElse(flat < total, body(rest, inner), None)
    blocks = tirx.Cast("int32", tirx.floordiv(total + (GPU_THREADS - 1), GPU_THREADS))
    for var, extent, tag in ((tx, tirx.IntImm("int32", GPU_THREADS), "threadIdx.x"), (bx, blocks, "blockIdx.x")):
        axis = tirx.IterVar(tvm.ir.Range.from_min_extent(0, extent), var, tirx.IterVar.ThreadIndex, tag)
        stmt = tirx.For(var, tirx.IntImm("int32", 0), extent, tirx.ForKind.THREAD_BINDING, stmt, thread_binding=axis)
    return stmt
