"""Convolutions whose image size varies: the image's windows as rows (im2col), then a dynamic dense.

A `conv2d(x, W)` (NCHW, W [K, C, R, S] a constant, one group, float32) whose input height or width is symbolic
becomes

    cols = im2col(x as NHWC)           [N*OH*OW, R*S*C]   a window of x per output pixel, zeros off the image
    y = matmul(cols, W as [R*S*C, K])  [N*OH*OW, K]       a dynamic dense site (`sites.match_dense`)
    out = y as [N, OH, OW, K], then NCHW

so its arithmetic runs on the tuned uKernels of a dynamic dense over N*OH*OW rows, which the analytic model
chooses as for a linear layer's, and `tune-model` tunes. The windows are one elementwise loop nest (parallel over
output pixels on a CPU, by the generic schedule; by DLight on a GPU). A 1x1 convolution of stride 1 is a dense
of the image's pixels: its im2col is the layout change to NHWC alone.
"""

from __future__ import annotations

from typing import Any

from ..model.default_schedule import PARALLEL_LOOPS
from ..model.epilogue import INJECTIVE
from ..model.rewrite import rewrite_calls


def match_symbolic_image(call: Any) -> bool:
    """A float32 conv2d, NCHW by a constant OIHW weight, one group, of which the input's height or width is
    symbolic."""
    from tvm import ir, tirx

    if getattr(call.op, "name", "") != "relax.nn.conv2d" or len(call.args) != 2:
        return False
    x, w = call.args
    attrs = call.attrs
    if not isinstance(w, ir.expr.GenericConst) or int(attrs.groups) != 1:
        return False
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return False
    shape = list(getattr(x.ty, "shape", None) or [])
    if len(shape) != 4 or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return False
    return any(not isinstance(d, tirx.IntImm) for d in shape[2:])


def im2col_compute(x: Any, kernel: tuple[int, int], strides: tuple[int, int], padding: tuple[int, int],
                   dilation: tuple[int, int], out_hw: tuple[Any, Any]) -> Any:
    """cols [N*OH*OW, R*S, C] of a TE tensor x [N, H, W, C]: x's window under each output pixel, zeros where it
    leaves the image; the channels innermost on both sides, so a window's pixel is one run of copies."""
    from tvm import te, tirx

    n, h, w, c = x.shape
    (r_, s_), (sh, sw), (pt, pl), (dh, dw) = kernel, strides, padding, dilation
    oh, ow = out_hw

    def window(p, q, ch):
        b, i, j = p // (oh * ow), p % (oh * ow) // ow, p % ow
        row, col = i * sh + q // s_ * dh - pt, j * sw + q % s_ * dw - pl
        inside = tirx.all(row >= 0, row < h, col >= 0, col < w)
        return tirx.if_then_else(inside, x[b, row, col, ch], tirx.const(0.0, x.dtype))

    # output pixels in parallel; each one's window position computed once, its rows of channels copied in vectors
    return te.compute((n * oh * ow, r_ * s_, c), window, name="im2col", attrs={PARALLEL_LOOPS: 1})


def rows_to_nchw(y: Any, out_shape: tuple[Any, ...]) -> Any:
    """out [N, K, OH, OW] of the dense's rows y [N*OH*OW, K] (its consumers' loops read y through this map)."""
    from tvm import te

    _, _, oh, ow = out_shape
    return te.compute(out_shape, lambda b, ch, i, j: y[(b * oh + i) * ow + j, ch], name="rows_to_nchw")


def emit_conv_as_dense(builder: Any, call: Any) -> tuple[Any, list[Any]]:
    """The conv2d as im2col of x in NHWC, a matmul by its weight (a constant [R*S*C, K]) and its rows as NCHW.
    Elementwise operators between two such convolutions fuse with the one's rows_to_nchw and the other's layout
    change and im2col into one loop nest, which reads the windows from the first one's rows as they are. Returns
    the expression and the GlobalVars of the two loop nests it adds."""
    import numpy as np
    from tvm import relax

    x, w = call.args
    attrs = call.attrs
    weight = w.value.numpy()
    k, c, r, s = weight.shape
    n, _, oh, ow = list(call.ty.shape)
    pads = [int(p) for p in attrs.padding]  # top, left, bottom, right
    nhwc = builder.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
    cols = builder.emit_te(im2col_compute, nhwc, (r, s), tuple(int(v) for v in attrs.strides), (pads[0], pads[1]),
                           tuple(int(v) for v in attrs.dilation), (oh, ow), primfunc_name_hint="im2col")
    flat = builder.emit(relax.op.reshape(cols, [cols.ty.shape[0], r * s * c]))
    packed = np.ascontiguousarray(weight.transpose(2, 3, 1, 0).reshape(r * s * c, k))  # [(r, s, c), K]
    y = builder.emit(relax.op.matmul(flat, relax.const(packed)))
    # the call itself, not a variable bound to it: FuseOps groups a call only with its users of the same binding
    out = builder.call_te(rows_to_nchw, y, (n, k, oh, ow), primfunc_name_hint="rows_to_nchw")
    return out, [builder.lookup_binding(cols).args[0], out.args[0]]


def lower_symbolic_convs(mod: Any) -> Any:
    """The module with every conv2d of a symbolic image size (`match_symbolic_image`) as im2col and a dense. The
    loop nests it adds are marked injective (FuseOps' analysis cannot tell from their divided indices), so that
    FuseOps joins them with the elementwise operators around them."""
    added: list[Any] = []

    def rewrite(builder: Any, call: Any, lookup: Any) -> Any | None:
        if not match_symbolic_image(call):
            return None
        out, gvars = emit_conv_as_dense(builder, call)
        added.extend(gvars)
        return out

    mod = rewrite_calls(mod, rewrite)
    for gv in added:
        mod.update_func(gv, mod[gv].with_attr("op_pattern", INJECTIVE))
    return mod
