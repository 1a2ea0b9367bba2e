"""Hand-written kernels for the operators of a dynamic model whose size varies in the dimension they walk: one
compiled function for every size, vectors throughout, as the generic schedules of symbolic loop nests cannot
(TVM's schedules vectorise a symbolic loop only under a predicate, which it then scalarises).

- **Products of two activations** (attention's scores q·kᵀ, seq x seq, and its weighted sum p·v, seq x head_dim):
  a `matmul(a, b)` whose operands are both computed (no constant weight to pack at build time) and of which a size
  varies becomes `batch_matmul_func`: the batch (the leading dimensions, flattened) in parallel with the output's
  rows, each output computed in register tiles of R rows x W columns (R = 4 where there are 4 rows, else 1; W =
  two vectors or one where the rows are that long), the reduction innermost, the tile's sums in registers. Tiles
  at the last rows and columns overlap the ones before them (they start at m - R, n - W), so every tile is whole:
  no predicate, no scalar tail. Rows shorter than 16 run a plain loop. Where b is a tensor transposed (attention's
  keys, their last dimension static), `batch_matmul_nt_func` reads that tensor as it is: no transpose is made.
- **Softmax over a symbolic last axis** (attention's probabilities): `softmax_func`, a row per iteration of a
  parallel loop, its three passes (max, exp and sum, scale) over the row while it is in cache, each in whole
  vectors then a scalar tail; exp is TVM's fast_exp polynomial, as in a static build. Softmax of scores plus a
  mask broadcast over the heads reads the two in its passes (the sum is not stored); PyTorch's `_safe_softmax`
  (SDPA's, as exported: softmax, then a test of each row for all -inf and a where that zeroes those rows) is that
  one kernel, zeroing such rows itself (`SYMBOLIC_PATTERNS`).
- **Grouped and depthwise convolutions of a varying image size** (a dense convolution takes im2col and a dynamic
  dense instead, `im2col.py`): `grouped_conv_func`, output rows in parallel, vectors of outputs along each row,
  the edges one output at a time.

`rewrite_symbolic_ops` replaces such calls in a Relax module (`SYMBOLIC_PATTERNS`, then `SYMBOLIC_OPS`: operator
-> matcher and emitter of the call to its kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..model.rewrite import rewrite_calls
from .sites import flat_size

ROW_TILE = 4  # output rows per register tile
LANES = 16  # fp32 lanes of the target's vectors where none is given (AVX-512); `rewrite_symbolic_ops` takes the
# target's. A register tile is 2 vectors wide, or 1 where the rows are shorter.


def register_tile(rows: int, width: int, dtype: str) -> Any:
    """A TVMScript macro: C[bi, i0:i0+rows, j0:j0+width] = A[bi, i0:i0+rows, :kd] @ B[b, :kd, c0:c0+width], its
    sums in registers (rows x width lanes), the reduction innermost."""
    from tvm.script import tirx as T

    @T.macro
    def tile(A, B, C, bi, i0, j0, b, c0, kd):
        acc = T.alloc_buffer((rows, width), dtype, scope="local")
        for r in T.unroll(rows):
            for v in T.vectorized(width):
                acc[r, v] = T.cast(0, dtype)
        for kk in range(kd):
            for r in T.unroll(rows):
                for v in T.vectorized(width):
                    acc[r, v] = acc[r, v] + A[bi, i0 + r, kk] * B[b, kk, c0 + v]
        for r in T.unroll(rows):
            for v in T.vectorized(width):
                C[bi, i0 + r, j0 + v] = acc[r, v]
    return tile


def batch_matmul_func(lanes: int = LANES, dtype: str = "float32") -> Any:
    """C[b] = A[b] @ B[b] for A [batch, m, k], B [batch, k, n], C [batch, m, n], every size symbolic."""
    from tvm.script import tirx as T

    def tiled(rows: int, width: int) -> Any:
        tile = register_tile(rows, width, dtype)

        @T.macro
        def body(A, B, C, nb, m, n, kd):
            row_tiles: T.let = (m + T.int64(rows - 1)) // T.int64(rows)
            col_tiles: T.let = (n + T.int64(width - 1)) // T.int64(width)
            for job in T.parallel(nb * row_tiles):
                bi: T.let = job // row_tiles
                i0: T.let = T.min(job % row_tiles * T.int64(rows), m - T.int64(rows))  # the last tile overlaps
                for jt in range(col_tiles):
                    j0: T.let = T.min(jt * T.int64(width), n - T.int64(width))
                    tile(A, B, C, bi, i0, j0, bi, j0, kd)
        return body

    wide4, narrow4 = tiled(ROW_TILE, 2 * lanes), tiled(ROW_TILE, lanes)
    wide1, narrow1 = tiled(1, 2 * lanes), tiled(1, lanes)

    @T.prim_func
    def batch_matmul(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        nb, m, n, kd = T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (nb, m, kd), dtype)
        B = T.match_buffer(b, (nb, kd, n), dtype)
        C = T.match_buffer(c, (nb, m, n), dtype)
        if n >= T.int64(2 * lanes):
            if m >= T.int64(ROW_TILE):
                wide4(A, B, C, nb, m, n, kd)
            else:
                wide1(A, B, C, nb, m, n, kd)
        elif n >= T.int64(lanes):
            if m >= T.int64(ROW_TILE):
                narrow4(A, B, C, nb, m, n, kd)
            else:
                narrow1(A, B, C, nb, m, n, kd)
        else:
            for job in T.parallel(nb * m):
                for j in range(n):
                    C[job // m, job % m, j] = T.cast(0, dtype)
                    for kk in range(kd):
                        C[job // m, job % m, j] = C[job // m, job % m, j] + A[job // m, job % m, kk] * \
                            B[job // m, kk, j]

    return batch_matmul


def batch_matmul_nt_func(k: int, lanes: int = LANES, dtype: str = "float32") -> Any:
    """C[b] = A[b] @ Bt[b]ᵀ for A [batch, m, k], Bt [batch, n, k] (attention's keys as they are, not transposed),
    C [batch, m, n]; k static, the rest symbolic. Rows under 4: each output a dot product of two rows in vectors
    (a decoding step's scores); else, per batch and column tile (in parallel), Bt's tile packed once into a
    [k, W] panel, then the register tiles of `batch_matmul_func` over every row tile."""
    from tvm.script import tirx as T

    whole = k // lanes * lanes

    def tiled(rows: int, width: int) -> Any:
        tile = register_tile(rows, width, dtype)

        @T.macro
        def body(A, Bt, C, nb, m, n):
            row_tiles: T.let = (m + T.int64(rows - 1)) // T.int64(rows)
            col_tiles: T.let = (n + T.int64(width - 1)) // T.int64(width)
            for job in T.parallel(nb * col_tiles):
                bi: T.let = job // col_tiles
                j0: T.let = T.min(job % col_tiles * T.int64(width), n - T.int64(width))  # the last tile overlaps
                panel = T.alloc_buffer((1, k, width), dtype, scope="local")
                for v, kk in T.grid(width, k):
                    panel[0, kk, v] = Bt[bi, j0 + v, kk]
                for it in range(row_tiles):
                    i0: T.let = T.min(it * T.int64(rows), m - T.int64(rows))
                    tile(A, panel, C, bi, i0, j0, 0, 0, k)
        return body

    wide, narrow = tiled(ROW_TILE, 2 * lanes), tiled(ROW_TILE, lanes)

    @T.prim_func
    def batch_matmul_nt(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        nb, m, n = T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (nb, m, k), dtype)
        Bt = T.match_buffer(b, (nb, n, k), dtype)
        C = T.match_buffer(c, (nb, m, n), dtype)
        if m >= T.int64(ROW_TILE) and n >= T.int64(2 * lanes):
            wide(A, Bt, C, nb, m, n)
        elif m >= T.int64(ROW_TILE) and n >= T.int64(lanes):
            narrow(A, Bt, C, nb, m, n)
        else:
            for job in T.parallel(nb * m):
                for j in range(n):
                    acc = T.alloc_buffer((lanes + 1,), dtype, scope="local")
                    for v in T.vectorized(lanes):
                        acc[v] = T.cast(0, dtype)
                    for k0 in range(whole // lanes):
                        for v in T.vectorized(lanes):
                            acc[v] = acc[v] + A[job // m, job % m, k0 * lanes + v] * Bt[job // m, j, k0 * lanes + v]
                    acc[lanes] = T.cast(0, dtype)
                    for v in range(lanes):
                        acc[lanes] = acc[lanes] + acc[v]
                    for kk in range(k - whole):
                        acc[lanes] = acc[lanes] + A[job // m, job % m, whole + kk] * Bt[job // m, j, whole + kk]
                    C[job // m, job % m, j] = acc[lanes]

    return batch_matmul_nt


def fast_exp(x: Any) -> Any:
    """TVM's fast_exp (topi): exp by 2^n times a degree-7 polynomial, |error| ~ 1e-7 relative, vectorisable."""
    from tvm import tirx

    f32 = "float32"
    c = lambda v: tirx.const(v, f32)  # noqa: E731 - a constant's shorthand
    clamped = tirx.max(tirx.min(x, c(88.3762626647949)), c(-88.3762626647949))
    n = tirx.floor(clamped * c(1.4426950216293335) + c(0.5))
    p = clamped - n * c(0.6931471824645996)
    poly = c(1.9875691e-4)
    for coef in (1.3981999e-3, 8.3334519e-3, 4.1665796e-2, 1.6666666e-1, 0.5):
        poly = poly * p + c(coef)
    poly = poly * p * p + p + c(1.0)
    scale = tirx.call_intrin(f32, "tirx.reinterpret", tirx.Cast("int32", n + c(127.0)) << 23)
    return tirx.max(scale * poly, x)


def softmax_func(lanes: int = LANES, biased: bool = False, safe: bool = False) -> Any:
    """Y = softmax(X) over the last axis of X, Y [rows, n], both sizes symbolic. `biased`: of X + B, B [m, n] (row r
    takes B's row r % m: an attention mask broadcast over the heads) read in the same passes, so the sum is never
    stored. `safe`: a row all -inf (every position masked) gives zeros, as PyTorch's `_safe_softmax` (else NaN)."""
    from tvm.script import tirx as T

    def value(X, B, r, j, m):  # element j of row r: of X + B where biased
        return X[r, j] + B[r % m, j] if biased else X[r, j]

    @T.macro
    def body(X, B, Y, rows, n, m):
        whole: T.let = n // T.int64(lanes)
        for r in T.parallel(rows):
            vec = T.alloc_buffer((lanes,), "float32", scope="local")
            one = T.alloc_buffer((2,), "float32", scope="local")  # the row's max, then its sum
            for v in T.vectorized(lanes):
                vec[v] = T.float32("-inf")
            for j in range(whole):
                for v in T.vectorized(lanes):
                    vec[v] = T.max(vec[v], value(X, B, r, j * T.int64(lanes) + v, m))
            one[0] = T.float32("-inf")
            for v in range(lanes):
                one[0] = T.max(one[0], vec[v])
            for j in range(n - whole * T.int64(lanes)):
                one[0] = T.max(one[0], value(X, B, r, whole * T.int64(lanes) + j, m))
            if safe and one[0] == T.float32("-inf"):
                for j in range(n):
                    Y[r, j] = T.float32(0)
            else:
                for v in T.vectorized(lanes):
                    vec[v] = T.float32(0)
                for j in range(whole):
                    for v in T.vectorized(lanes):
                        Y[r, j * T.int64(lanes) + v] = fast_exp(value(X, B, r, j * T.int64(lanes) + v, m) - one[0])
                        vec[v] = vec[v] + Y[r, j * T.int64(lanes) + v]
                one[1] = T.float32(0)
                for v in range(lanes):
                    one[1] = one[1] + vec[v]
                for j in range(n - whole * T.int64(lanes)):
                    Y[r, whole * T.int64(lanes) + j] = fast_exp(value(X, B, r, whole * T.int64(lanes) + j, m) - one[0])
                    one[1] = one[1] + Y[r, whole * T.int64(lanes) + j]
                one[1] = T.float32(1) / one[1]
                for j in range(whole):
                    for v in T.vectorized(lanes):
                        Y[r, j * T.int64(lanes) + v] = Y[r, j * T.int64(lanes) + v] * one[1]
                for j in range(n - whole * T.int64(lanes)):
                    Y[r, whole * T.int64(lanes) + j] = Y[r, whole * T.int64(lanes) + j] * one[1]

    @T.prim_func
    def softmax_bias(x: T.handle, b: T.handle, y: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        rows, n, m = T.int64(), T.int64(), T.int64()
        X = T.match_buffer(x, (rows, n), "float32")
        B = T.match_buffer(b, (m, n), "float32")
        Y = T.match_buffer(y, (rows, n), "float32")
        body(X, B, Y, rows, n, m)

    @T.prim_func
    def softmax(x: T.handle, y: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        rows, n = T.int64(), T.int64()
        X = T.match_buffer(x, (rows, n), "float32")
        Y = T.match_buffer(y, (rows, n), "float32")
        body(X, X, Y, rows, n, rows)

    return softmax_bias if biased else softmax


CONV_ROWS = 8  # output rows per parallel job of the grouped convolution kernel (its accumulators allocated per job)


def grouped_conv_func(window: tuple[int, int], strides: tuple[int, int], padding: tuple[int, int],
                      dilation: tuple[int, int], in_per_group: int = 1, out_per_group: int = 1, lanes: int = LANES,
                      dtype: str = "float32") -> Any:
    """Y = grouped conv2d(X, W) for X [batch, c_in, h, w], W [c_out, in_per_group, R, S], Y [batch, c_out, oh, ow]
    (NCHW; output channel k reads the `in_per_group` input channels of its group k // out_per_group: a depthwise
    convolution has one of each), every size symbolic; `padding` is the top and left one (the bottom and right
    follow from oh and ow). A parallel loop over (batch, output channel, CONV_ROWS output rows); in a row, the
    columns whose window lies inside the row in vectors of `lanes` outputs (the last vector overlapping the one
    before it), each tap a vector of an input row (strided by the column stride) times the tap's weight; the columns
    at the edges, and rows shorter than a vector, one output at a time with their taps checked against the image."""
    from tvm.script import tirx as T

    R, S = window
    sh, sw = strides
    ph, pw = padding
    dh, dw = dilation
    G, M = in_per_group, out_per_group
    first = (pw + sw - 1) // sw  # the first column whose window starts inside the row
    rows = CONV_ROWS

    @T.prim_func
    def grouped_conv(x: T.handle, w: T.handle, y: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        nb, c, k, h, wd, oh, ow = T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        X = T.match_buffer(x, (nb, c, h, wd), dtype)
        W = T.match_buffer(w, (k, G, R, S), dtype)
        Y = T.match_buffer(y, (nb, k, oh, ow), dtype)
        # columns [lo, hi) in vectors: those whose window lies inside the row, where there are a vector's worth
        last: T.let = T.min((wd - T.int64(1 + (S - 1) * dw - pw)) // T.int64(sw) + T.int64(1), ow)
        lo: T.let = T.if_then_else(last - T.int64(first) >= T.int64(lanes), T.int64(first), T.int64(0))
        hi: T.let = T.if_then_else(last - T.int64(first) >= T.int64(lanes), last, T.int64(0))
        blocks: T.let = (oh + T.int64(rows - 1)) // T.int64(rows)
        for job in T.parallel(nb * k * blocks):
            b: T.let = job // (k * blocks)
            ch: T.let = job // blocks % k
            c0: T.let = ch // T.int64(M) * T.int64(G)  # the group's first input channel
            acc = T.alloc_buffer((lanes,), dtype, scope="local")
            one = T.alloc_buffer((1,), dtype, scope="local")
            for ii in range(T.min(T.int64(rows), oh - job % blocks * T.int64(rows))):
                i: T.let = job % blocks * T.int64(rows) + ii
                for t in range((hi - lo + T.int64(lanes - 1)) // T.int64(lanes)):
                    j0: T.let = T.min(lo + t * T.int64(lanes), hi - T.int64(lanes))
                    for v in T.vectorized(lanes):
                        acc[v] = T.cast(0, dtype)
                    for g in range(G):
                        for r in T.unroll(R):
                            ih: T.let = i * T.int64(sh) + T.int64(r * dh - ph)
                            if ih >= T.int64(0) and ih < h:
                                for q in T.unroll(S):
                                    for v in T.vectorized(lanes):
                                        acc[v] = acc[v] + X[b, c0 + g, ih, (j0 + v) * T.int64(sw)
                                                            + T.int64(q * dw - pw)] * W[ch, g, r, q]
                    for v in T.vectorized(lanes):
                        Y[b, ch, i, j0 + v] = acc[v]
                for e in range(lo + ow - hi):  # the edge columns: [0, lo) and [hi, ow)
                    j: T.let = T.if_then_else(e < lo, e, hi + e - lo)
                    one[0] = T.cast(0, dtype)
                    for g, r, q in T.grid(G, R, S):
                        ih: T.let = i * T.int64(sh) + T.int64(r * dh - ph)
                        iw: T.let = j * T.int64(sw) + T.int64(q * dw - pw)
                        if ih >= T.int64(0) and ih < h and iw >= T.int64(0) and iw < wd:
                            one[0] = one[0] + X[b, c0 + g, ih, iw] * W[ch, g, r, q]
                    Y[b, ch, i, j] = one[0]

    return grouped_conv


def _symbolic(shape: Any) -> bool:
    from tvm import tirx

    return not all(isinstance(d, tirx.IntImm) for d in shape)


def _same(p: Any, q: Any) -> bool:
    from tvm.sym.analyzer import Analyzer

    return bool(Analyzer().can_prove_equal(p, q))


def match_product(call: Any) -> bool:
    """A float32 matmul of two computed operands of the same batch dimensions, one of its sizes symbolic."""
    from tvm import ir

    if len(call.args) != 2 or any(isinstance(x, ir.expr.GenericConst) for x in call.args):
        return False
    shapes = [list(getattr(x.ty, "shape", None) or []) for x in call.args]
    if any(len(s) < 2 or str(x.ty.dtype) != "float32" for s, x in zip(shapes, call.args)):
        return False
    sa, sb = shapes
    if len(sa) != len(sb) or any(not _same(p, q) for p, q in zip(sa[:-2], sb[:-2])):
        return False  # broadcast batch dimensions: left to TVM's generic schedule
    return _symbolic([*sa, *sb])


def _transposed_source(b: Any, lookup: Callable[[Any], Any]) -> Any | None:
    """The tensor S [*lead, n, k] (k static) when `b` is S with its last two axes swapped, as a product's keys
    arrive (permute_dims, then an identity broadcast_to and a reshape of the leading axes), else None."""
    from tvm import relax, tirx

    expr = b
    while isinstance(expr, relax.Var) and lookup(expr) is not None:
        bound = lookup(expr)
        name = getattr(getattr(bound, "op", None), "name", "")
        if name in ("relax.reshape", "relax.broadcast_to"):
            src = bound.args[0]
            same = name == "relax.reshape" or (len(src.ty.shape) == len(bound.ty.shape) and all(
                _same(p, q) for p, q in zip(src.ty.shape, bound.ty.shape)))
            if not same:
                return None
            expr = src
        elif name == "relax.permute_dims":
            src, axes = bound.args[0], [int(a) for a in bound.attrs.axes]
            rank = len(axes)
            swapped = axes == [*range(rank - 2), rank - 1, rank - 2]
            shape = list(src.ty.shape)
            return src if swapped and isinstance(shape[-1], tirx.IntImm) else None
        else:
            return None
    return None


def emit_product(builder: Any, kernel_of: Callable[[str, Callable[[int], Any]], Any], call: Any,
                 lookup: Callable[[Any], Any]) -> Any:
    """The product on `batch_matmul_func`, its operands viewed as 3-d; where B is a tensor transposed (attention's
    keys), on `batch_matmul_nt_func` of that tensor as it is (no transpose made)."""
    from tvm import relax

    a, b = call.args
    sa, sb = list(a.ty.shape), list(b.ty.shape)
    lead, size = sa[:-2], flat_size(sa[:-2])
    keys = _transposed_source(b, lookup)
    if keys is not None:
        k = int(keys.ty.shape[-1])
        gv, b = kernel_of(f"dynamic_batch_matmul_nt_k{k}", lambda lanes: batch_matmul_nt_func(k, lanes)), keys
    else:
        gv = kernel_of("dynamic_batch_matmul", batch_matmul_func)
    a3, b3 = (x if len(x.ty.shape) == 3 else builder.emit(relax.op.reshape(x, [size, *list(x.ty.shape)[-2:]]))
              for x in (a, b))
    out = relax.call_tir(gv, [a3, b3], relax.TensorType([size, sa[-2], sb[-1]], "float32"))
    return out if len(sa) == 3 else relax.op.reshape(builder.emit(out), [*lead, sa[-2], sb[-1]])


def match_softmax(call: Any) -> bool:
    """A float32 softmax over the last axis, that axis of a symbolic size."""
    shape = list(getattr(call.args[0].ty, "shape", None) or [])
    axis = int(call.attrs.axis) if call.attrs is not None else -1
    return (str(call.args[0].ty.dtype) == "float32" and len(shape) >= 1 and axis in (-1, len(shape) - 1)
            and _symbolic(shape[-1:]))


def emit_softmax(builder: Any, kernel_of: Callable[[str, Callable[[int], Any]], Any], call: Any,
                 lookup: Callable[[Any], Any]) -> Any:
    return softmax_call(builder, kernel_of, call.args[0], lookup, safe=False)


def _bound(expr: Any, lookup: Callable[[Any], Any], op: str) -> Any | None:
    """The call `expr` is bound to where it calls the Relax operator `op`, else None."""
    from tvm import relax

    bound = lookup(expr) if isinstance(expr, relax.Var) else None
    return bound if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == op else None


def _scalar(expr: Any, value: float) -> bool:
    from tvm import ir

    return isinstance(expr, ir.Constant) and expr.value.numpy().size == 1 and \
        float(expr.value.numpy().reshape(())) == value


def _all_masked_rows(cond: Any, lookup: Callable[[Any], Any]) -> Any | None:
    """S where `cond` is, per row of S, whether every element is -inf: PyTorch's `_safe_softmax` test as exported
    and imported (bools on int8): not(bool(max(int8(not(S == -inf)), axis=-1, keepdims))); else None."""
    expr = cond
    for op in ("relax.logical_not", "relax.astype", "relax.max", "relax.astype", "relax.logical_not"):
        bound = _bound(expr, lookup, op)
        if bound is None:
            return None
        if op == "relax.max":
            rank = len(bound.args[0].ty.shape)
            axes = [int(a) % rank for a in (bound.attrs.axis or [])]
            if axes != [rank - 1] or not bool(bound.attrs.keepdims):
                return None
        expr = bound.args[0]
    equal = _bound(expr, lookup, "relax.equal")
    return equal.args[0] if equal is not None and _scalar(equal.args[1], float("-inf")) else None


def match_safe_softmax(call: Any) -> bool:
    """A float32 where(c, zeros, s) of a symbolic last axis: PyTorch's `_safe_softmax` where c is the rows of s's
    input all -inf and s its softmax (`emit_safe_softmax` checks)."""
    shape = list(getattr(call.ty, "shape", None) or [])
    return len(call.args) == 3 and str(call.ty.dtype) == "float32" and len(shape) >= 1 and _symbolic(shape[-1:])


def emit_safe_softmax(builder: Any, kernel_of: Callable[[str, Callable[[int], Any]], Any], call: Any,
                      lookup: Callable[[Any], Any]) -> Any | None:
    """PyTorch's `_safe_softmax` (SDPA's softmax: rows all masked give zeros), as exported, on one safe softmax
    kernel: softmax, the row test and the where were four passes over the scores."""
    cond, zeros, probs = call.args
    softmax = _bound(probs, lookup, "relax.nn.softmax")
    if softmax is None or not match_softmax(softmax):
        return None
    scores = softmax.args[0]
    fill = _bound(zeros, lookup, "relax.full_like")
    if not (_scalar(zeros, 0.0) or fill is not None and _scalar(fill.args[1], 0.0)):
        return None
    masked = _all_masked_rows(cond, lookup)
    if masked is None or not masked.same_as(scores) or len(call.ty.shape) != len(scores.ty.shape) or not all(
            _same(p, q) for p, q in zip(call.ty.shape, scores.ty.shape)):
        return None
    return softmax_call(builder, kernel_of, scores, lookup, safe=True)


def _row_bias(scores: Any, lookup: Callable[[Any], Any]) -> tuple[Any, Any] | None:
    """(X, B) where `scores` is X + B (either order), B float32 of X's trailing shape after leading ones (an
    attention mask [1, 1, q, k] added to scores [batch, heads, q, k]), else None."""
    add = _bound(scores, lookup, "relax.add")
    if add is None:
        return None
    shape = list(scores.ty.shape)
    for x, b in (add.args, add.args[::-1]):
        xs, bs = list(getattr(x.ty, "shape", None) or []), list(getattr(b.ty, "shape", None) or [])
        if len(xs) != len(shape) or not all(_same(p, q) for p, q in zip(xs, shape)) or not bs or len(bs) > len(xs):
            continue
        ones = min(next((i for i, d in enumerate(bs) if not _same(d, 1)), len(bs)), len(bs) - 1)  # B's leading 1s
        if str(b.ty.dtype) == "float32" and all(_same(p, q) for p, q in zip(bs[ones:], xs[len(xs) - len(bs) + ones:])):
            return x, b
    return None


def softmax_call(builder: Any, kernel_of: Callable[[str, Callable[[int], Any]], Any], scores: Any,
                 lookup: Callable[[Any], Any], safe: bool) -> Any:
    """softmax(scores) over the last axis on `softmax_func` (`safe`: rows all -inf give zeros), the inputs viewed as
    2-d; where the scores are X + B with B broadcast over X's leading axes (an attention mask), of X and B, the sum
    not stored."""
    from tvm import relax

    shape = list(scores.ty.shape)
    biased = _row_bias(scores, lookup)
    name = f"dynamic_{'safe_' if safe else ''}softmax{'_bias' if biased else ''}"
    gv = kernel_of(name, lambda lanes: softmax_func(lanes, biased=biased is not None, safe=safe))
    x, *bias = biased or (scores,)
    flat = [flat_size(shape[:-1]), shape[-1]]
    args = [v if len(v.ty.shape) == 2 else builder.emit(relax.op.reshape(v, [flat_size(list(v.ty.shape)[:-1]),
                                                                             shape[-1]])) for v in (x, *bias)]
    out = relax.call_tir(gv, args, relax.TensorType(flat, "float32"))
    return out if len(shape) == 2 else relax.op.reshape(builder.emit(out), shape)


def match_grouped_conv(call: Any) -> bool:
    """A float32 grouped conv2d (NCHW, OIHW weight [K, C / groups, R, S]; depthwise ones too) of which a size of the
    input is symbolic; the channels and the weight static."""
    from tvm import tirx

    if len(call.args) != 2:
        return False
    x, w = call.args
    a = call.attrs
    shape, w_shape = (list(getattr(v.ty, "shape", None) or []) for v in (x, w))
    if len(shape) != 4 or len(w_shape) != 4 or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return False
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return False
    if str(a.out_dtype) not in ("", "float32") or not all(isinstance(d, tirx.IntImm) for d in [*w_shape, shape[1]]):
        return False
    groups, (k, per_group), c = int(a.groups), (int(d) for d in w_shape[:2]), int(shape[1])
    return groups > 1 and k % groups == 0 and c == groups * per_group and _symbolic(shape)


def emit_grouped_conv(builder: Any, kernel_of: Callable[[str, Callable[[int], Any]], Any], call: Any,
                      lookup: Callable[[Any], Any]) -> Any:
    """The grouped convolution on `grouped_conv_func` of its window, strides, top-left padding, dilation and
    channels per group (in and out); depthwise ones (one of each) are named so."""
    from tvm import relax

    a = call.attrs
    w_shape = [int(d) for d in call.args[1].ty.shape]
    window, in_per_group, out_per_group = tuple(w_shape[2:]), w_shape[1], w_shape[0] // int(a.groups)
    strides, dilation = (tuple(int(v) for v in vals) for vals in (a.strides, a.dilation))
    padding = tuple(int(v) for v in list(a.padding)[:2])
    kind = "depthwise" if in_per_group == out_per_group == 1 else f"group_conv_{in_per_group}to{out_per_group}"
    name = f"dynamic_{kind}_" + "_".join("x".join(map(str, v)) for v in (window, strides, padding, dilation))
    gv = kernel_of(name, lambda lanes: grouped_conv_func(window, strides, padding, dilation, in_per_group,
                                                         out_per_group, lanes))
    return relax.call_tir(gv, list(call.args), relax.TensorType(list(call.ty.shape), "float32"))


def in_root_block(func: Any) -> Any:
    """The PrimFunc with its body in an opaque root block, as Relax's passes expect of a call_tir's function (its
    loops stay as written)."""
    from tvm import s_tir

    if isinstance(func.body, s_tir.SBlockRealize):
        return func
    root = s_tir.SBlock([], [], [], "root", func.body)
    return func.with_body(s_tir.SBlockRealize([], True, root))


@dataclass(frozen=True)
class SymbolicOp:
    """A Relax operator with hand-written kernels where a size varies."""

    matches: Callable[[Any], bool]  # whether a call of the operator takes them
    # (builder, kernel_of(name, make PrimFunc of the vector lanes) -> its GlobalVar, call, binding lookup) -> the
    # replacing expression, or None to keep the call
    emit: Callable[[Any, Callable[[str, Callable[[int], Any]], Any], Any, Callable[[Any], Any]], Any]


SYMBOLIC_PATTERNS = {  # calls whose inputs are a pattern of calls taken as one (before SYMBOLIC_OPS)
    "relax.where": SymbolicOp(match_safe_softmax, emit_safe_softmax),
}
SYMBOLIC_OPS = {
    "relax.matmul": SymbolicOp(match_product, emit_product),
    "relax.nn.softmax": SymbolicOp(match_softmax, emit_softmax),
    "relax.nn.conv2d": SymbolicOp(match_grouped_conv, emit_grouped_conv),
}


def rewrite_symbolic_ops(mod: Any, lanes: int = LANES) -> tuple[Any, dict[str, int]]:
    """The module with every call a `SYMBOLIC_OPS` entry matches on its kernels (vectors of `lanes` fp32, the
    target's), and how many calls each kernel takes (the kernels' names)."""
    from tvm import relax

    kernels: dict[str, Any] = {}
    counts: dict[str, int] = {}

    def rewriter(ops: dict[str, SymbolicOp]) -> Callable[[Any, Any, Callable[[Any], Any]], Any | None]:
        def rewrite(builder: Any, call: Any, lookup: Callable[[Any], Any]) -> Any | None:
            def kernel_of(name: str, make: Callable[[int], Any]) -> Any:
                if name not in kernels:
                    func = in_root_block(make(lanes)).with_attr("global_symbol", name)
                    kernels[name] = builder.add_func(func, name)
                counts[name] = counts.get(name, 0) + 1
                return kernels[name]

            op = ops.get(getattr(call.op, "name", ""))
            return op.emit(builder, kernel_of, call, lookup) if op is not None and op.matches(call) else None
        return rewrite

    # the patterns first (their inner calls still as imported), what they leave unused dropped
    mod = relax.transform.DeadCodeElimination()(rewrite_calls(mod, rewriter(SYMBOLIC_PATTERNS)))
    return rewrite_calls(mod, rewriter(SYMBOLIC_OPS)), counts
