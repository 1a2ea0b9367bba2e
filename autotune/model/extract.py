"""Find the tunable operators of a captured model and turn them into tasks.

Tunable calls are recognised in the Relax module *before* legalization, where the operator
attributes (strides, padding, dilation, groups, layouts) are explicit:
  R.nn.conv2d NCHW/OIHW, groups 1              -> conv2d
  R.nn.conv2d groups == channels, weight [C,1,R,S] -> depthwise_conv2d (undilated)
  R.nn.conv2d other groups                      -> group_conv2d (also depthwise with a channel multiplier
                                                   or a dilation)
  R.nn.conv1d NCW/OIW                           -> the same tasks with H = R = 1 (data [N,C,W] seen as [N,C,1,W])
  A convolution whose padding differs between sides or axes (a 1-d one's always pads W only) gets its data
  zero-padded by an R.nn.pad before the kernel, and a task with padding 0; one whose H and W strides differ
  (constant weight, undilated) is a stride-1 one over the phases of its padded data (`_phase_split`); one whose
  H and W dilations differ (stride 1) an undilated one over those phases, batched (`_dilation_split`).
  R.nn.conv3d NCDHW/OIDHW                       -> conv2d / group_conv2d over the output's depth slices (batch
                                                   N x D'), the kernel's depth taps stacked into the channels
  R.nn.conv2d_transpose / conv1d_transpose (IOHW / IOW, constant weight) -> conv2d (grouped:
                                                   group_conv2d) over the input, one output channel per (channel,
                                                   output phase), then a pixel shuffle and a crop (`transposed_weight`);
                                                   dilated: at stride 1 a dilated conv2d, strided with zero taps
  R.matmul [.., M, K] @ permute_dims(W const)   -> dense (a linear layer: its weight W [N, K] is packed once,
                                                   at build time, in the layout the kernel reads)
  R.matmul [.., M, K] @ [K, N]                  -> matmul (leading dims folded into M)
  R.matmul [b.., M, K] @ [b.., K, N]            -> batch_matmul (B = product of batch dims)
Anything else of these ops is left to TVM, with the reason recorded.
A model in bf16 computes each product as a cast to bf16 of the product summed in float32 (`aten_fixes`): the cast
is the site, and its task is the product's in bfloat16 (`product_call`). A quantized model's products are int8 by
int8 summed in int32 (`quantized`): int8 tasks.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AutotuneError
from ..task import Task, make_task
from ..templates import resolve
from .capture import Captured, ExportFailed, ImportFailed, capture, evaluating
from .default_schedule import default_candidates


@dataclass(frozen=True)
class Site:
    """One tunable call: its task and how its operands map onto the task's operands."""

    task: Task
    a_shape: tuple[int, ...]  # task's first operand shape (operand reshaped to it when it differs)
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]  # the call's own output shape (task output reshaped back to it)
    weight: Any = None  # a constant the task takes in place of the call's second operand (dense: W [N, K] for
    # the call's W^T; a transposed convolution: `transposed_weight` of its kernel)
    data_steps: tuple[Step, ...] = ()  # the call's data -> the task's first operand (then reshaped to a_shape)
    out_steps: tuple[Step, ...] = ()  # the task's output -> the call's (then reshaped to out_shape)


# One Relax op on a tensor, as plain data (`autotune.model.build` emits them):
#   ("reshape", shape)  ("pad", flat before/after widths per axis)  ("permute", axes)
#   ("crop", axes, begin, end)  strided_slice, step 1
#   ("taps", axis, count, step, stride, length)  `count` strided slices of `axis` (the i-th from i * step, `length`
#                                                elements `stride` apart) stacked as a new axis after it
Step = tuple


def _padded(shape: tuple[int, ...], pads: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` after ("pad", pads)."""
    return tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(shape))


def _plane_pad(data: tuple[int, ...], pads: tuple[int, ...], lifted: bool) -> tuple[tuple[Step, ...], tuple[int, ...]]:
    """(steps, shape): [N, C, H, W] `data` zero-padded by (top, bottom, left, right); `lifted`: the call's data is
    1-d and is first viewed as `data`."""
    widths = (0, 0, 0, 0, *pads)
    return ((("reshape", data),) if lifted else ()) + (("pad", widths),), _padded(data, widths)


@dataclass(frozen=True)
class Skipped:
    """A call of a tunable kind that autotune leaves to TVM, and why."""

    what: str
    reason: str


def _shape(expr: Any) -> tuple[int, ...] | None:
    ty = expr.ty
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(d) for d in shape)
    except TypeError:  # symbolic dimension
        return None


def _dtype(expr: Any) -> str:
    return str(expr.ty.dtype)


FLOATS = ("float32", "bfloat16", "float16")  # input types of a product summed in float32 (`product_call`)


def _product_type(call: Any) -> str | None:
    """The type of the task a product's operand and result types make, or None: a float type of FLOATS summed in
    float32; int8 by int8 summed in int32 (a quantized model's product: `quantized`)."""
    types = {_dtype(call.args[0]), _dtype(call.args[1])}
    out = str(getattr(call.attrs, "out_dtype", "") or "")
    kind = types.pop() if len(types) == 1 else None
    if kind in FLOATS and out in ("", "void", "float32"):
        return kind
    return "int8" if kind == "int8" and out == "int32" else None


def _type_problem(call: Any) -> str | None:
    """Why a product's types are not those of a task (`_product_type`), or None."""
    if _product_type(call) is None:
        types = sorted({_dtype(call.args[0]), _dtype(call.args[1])})
        return f"dtype {'/'.join(types)} (only float32, bfloat16, float16, and int8 summed in int32)"
    return None


def product_call(call: Any, lookup: Callable[[Any], Any]) -> tuple[Any, str]:
    """(the product call `call` stands for, the dtype of its task): `call` itself, float32 (int8 for int8 operands
    summed in int32); a cast to bf16 (fp16) of a product of bf16 (fp16) tensors summed in float32 (how a model in
    that type computes one: `aten_fixes`) stands for that product, in that type; such a product itself stands for
    nothing, (None, ""): its cast is the site."""
    from tvm import relax

    name = getattr(call.op, "name", "")
    if name == "relax.astype":
        arg = call.args[0]
        inner = lookup(arg) if isinstance(arg, relax.Var) else arg
        cast = str(call.attrs.dtype)
        if isinstance(inner, relax.Call) and getattr(inner.op, "name", "") in SITES and cast != "float32" \
                and _product_type(inner) == cast:
            return inner, cast
    elif name in SITES and _product_type(call) == "int8":
        return call, "int8"
    elif name in SITES and _product_type(call) not in (None, "float32"):
        return None, ""
    return call, "float32"


def _unsupported(call: Any, shapes: tuple[Any, ...], layouts: tuple[str, str, str]) -> str | None:
    """Why a convolution call is not a task (a symbolic shape, other layouts, other types), or None."""
    a = call.attrs
    if any(shape is None for shape in shapes):
        return "dynamic shape"
    if (a.data_layout, a.kernel_layout, a.out_layout or layouts[2]) != layouts:
        return f"layout {a.data_layout}/{a.kernel_layout}/{a.out_layout} (only {'/'.join(layouts[:2])})"
    return _type_problem(call)


def _conv_site(call: Any, target: dict, lookup: Callable[[Any], Any]) -> Site | Skipped:
    """conv2d, or conv1d as a conv2d of height 1: the task, with an explicit pad for uneven padding (strides that
    differ over H and W: `_phase_split`)."""
    a = call.attrs
    one_d = call.op.name == "relax.nn.conv1d"
    data, weight = _shape(call.args[0]), _shape(call.args[1])
    what = f"{'conv1d' if one_d else 'conv2d'} data={data} weight={weight}"
    why = _unsupported(call, (data, weight), ("NCW", "OIW", "NCW") if one_d else ("NCHW", "OIHW", "NCHW"))
    if why:
        return Skipped(what, why)
    strides, padding, dilation = (tuple(int(v) for v in x) for x in (a.strides, a.padding, a.dilation))
    if one_d:  # height 1, a 1-row kernel: the height's stride and dilation do nothing
        data, weight = (*data[:2], 1, data[2]), (*weight[:2], 1, weight[2])
        strides, dilation, padding = strides * 2, dilation * 2, (0, padding[0], 0, padding[1])
    top, left, bottom, right = padding
    groups = int(a.groups)
    if len(set(strides)) != 1:
        const = _constant(call.args[1], lookup)
        if dilation != (1, 1) or const is None:
            why = "the convolution is dilated" if const is not None else "the weight is computed"
            return Skipped(what, f"strides {strides} differ and {why}")
        return _phase_split(data, const.value.numpy(), strides, (top, bottom, left, right), groups, _shape(call),
                            target)
    if len(set(dilation)) != 1:
        if strides != (1, 1):
            return Skipped(what, f"dilations {dilation} differ and the convolution is strided")
        return _dilation_split(data, weight, dilation, (top, bottom, left, right), groups, _shape(call), target)
    steps: tuple[Step, ...] = ()
    if len(set(padding)) != 1:
        steps, data = _plane_pad(data, (top, bottom, left, right), one_d)
    task = _conv_task(data, weight, strides[0], 0 if steps else top, dilation[0], groups, target)
    return Site(task, data, weight, _shape(call), data_steps=steps)


def _conv_task(data: tuple[int, ...], weight: tuple[int, ...], stride: int, padding: int, dilation: int,
               groups: int, target: dict) -> Task:
    """The task of a convolution: conv2d, depthwise_conv2d (groups == channels, no multiplier, undilated) or
    group_conv2d (other groups, a channel multiplier, a dilated depthwise convolution)."""
    n, c, h, w = data
    k, cg, r, s = weight
    p = {"N": n, "C": c, "H": h, "W": w, "R": r, "S": s, "stride": stride, "padding": padding}
    if groups == 1:
        return make_task("conv2d", {**p, "K": k, "dilation": dilation}, target=target)
    if groups == c and cg == 1 and k == c and dilation == 1:
        return make_task("depthwise_conv2d", p, target=target)
    return make_task("group_conv2d", {**p, "K": k, "groups": groups, "dilation": dilation}, target=target)


def _dilation_split(data: tuple[int, ...], weight: tuple[int, ...], dilation: tuple[int, int], pads: tuple[int, ...],
                    groups: int, out_shape: tuple[int, ...], target: dict) -> Site:
    """A stride-1 convolution of dilations (dh, dw) as an undilated one over the dh x dw phases of its zero-padded
    data, batched (space to batch): x[n, c, Q dh + a, P dw + b] -> x'[(n, a, b), c, Q, P]; output phase (a, b) at
    (Q, P) is the output at (Q dh + a, P dw + b), laid back and cropped. The weight is used as it is. `pads`: (top,
    bottom, left, right)."""
    n, c, h, w = data
    (dh, dw), (top, bottom, left, right) = dilation, pads
    k, _, r, s = weight
    hq, wq = -(-(h + top + bottom) // dh), -(-(w + left + right) // dw)
    oh, ow = h + top + bottom - dh * (r - 1), w + left + right - dw * (s - 1)
    pads = (0, 0, 0, 0, top, hq * dh - h - top, left, wq * dw - w - left)
    steps = ((("pad", pads),) if any(pads) else ()) + (
        ("reshape", (n, c, hq, dh, wq, dw)), ("permute", (0, 3, 5, 1, 2, 4)), ("reshape", (n * dh * dw, c, hq, wq)))
    phases = (n * dh * dw, c, hq, wq)
    task = _conv_task(phases, weight, 1, 0, 1, groups, target)
    ohq, owq = hq - r + 1, wq - s + 1
    back = (("reshape", (n, dh, dw, k, ohq, owq)), ("permute", (0, 3, 4, 1, 5, 2)),
            ("reshape", (n, k, ohq * dh, owq * dw)))
    crop = (("crop", (2, 3), (0, 0), (oh, ow)),) if (ohq * dh, owq * dw) != (oh, ow) else ()
    return Site(task, phases, weight, out_shape, data_steps=steps, out_steps=back + crop)


def _conv3d_site(call: Any, target: dict, lookup: Callable[[Any], Any]) -> Site | Skipped:
    """conv3d as a conv2d (grouped: group_conv2d) over the output's depth slices, batched: each slice's depth taps
    of the input are stacked into its channels, [N, C, D, H, W] -> [N * D', C * T, H, W] (kernel [K, C * T, R, S]),
    and the output [N * D', K, H', W'] is laid back as [N, K, D', H', W']."""
    a = call.attrs
    data, weight = _shape(call.args[0]), _shape(call.args[1])
    what = f"conv3d data={data} weight={weight}"
    why = _unsupported(call, (data, weight), ("NCDHW", "OIDHW", "NCDHW"))
    if why:
        return Skipped(what, why)
    strides, padding, dilation = (tuple(int(v) for v in x) for x in (a.strides, a.padding, a.dilation))
    const = _constant(call.args[1], lookup) if strides[1] != strides[2] else None
    if dilation[1] != dilation[2] or (strides[1] != strides[2] and (dilation[1] != 1 or const is None)):
        return Skipped(what, f"strides {strides} / dilation {dilation} differ over height and width")
    front, top, left, back, bottom, right = padding
    n, c, d, h, w = data
    k, cg, t, r, s = weight
    depth = (d + front + back - dilation[0] * (t - 1) - 1) // strides[0] + 1
    steps: tuple[Step, ...] = (("pad", (0, 0, 0, 0, front, back, 0, 0, 0, 0)),) if front or back else ()
    steps += (("taps", 2, t, dilation[0], strides[0], depth), ("permute", (0, 2, 1, 3, 4, 5)),
              ("reshape", (n * depth, c * t, h, w)))
    plane = (n * depth, c * t, h, w)
    groups = int(a.groups)
    if const is not None:  # H and W strides differ
        site = _phase_split(plane, const.value.numpy().reshape(k, cg * t, r, s), strides[1:],
                            (top, bottom, left, right), groups, None, target)
        back_to_3d = (("reshape", (n, depth, k, *site.out_shape[2:])), ("permute", (0, 2, 1, 3, 4)))
        return replace(site, data_steps=steps + site.data_steps, out_steps=site.out_steps + back_to_3d,
                       out_shape=_shape(call))
    if len({top, bottom, left, right}) != 1:
        padding_steps, plane = _plane_pad(plane, (top, bottom, left, right), False)
        steps, top = steps + padding_steps, 0
    p = {"N": plane[0], "C": plane[1], "H": plane[2], "W": plane[3], "K": k, "R": r, "S": s, "stride": strides[1],
         "padding": top, "dilation": dilation[1]}
    task = make_task("conv2d", p, target=target) if groups == 1 else make_task(
        "group_conv2d", {**p, "groups": groups}, target=target)
    _, _, oh, ow = task.opdef.output_shape(task.shape)
    back_to_3d = (("reshape", (n, depth, k, oh, ow)), ("permute", (0, 2, 1, 3, 4)))
    return Site(task, plane, (k, cg * t, r, s), _shape(call), data_steps=steps, out_steps=back_to_3d)


def _phase_split(data: tuple[int, ...], weight: np.ndarray, strides: tuple[int, int], pads: tuple[int, ...],
                 groups: int, out_shape: tuple[int, ...] | None, target: dict) -> Site:
    """A convolution of strides (sh, sw) as a stride-1 one over the sh x sw phases of its zero-padded data:
    x[n, c, Q sh + a, P sw + b] -> x'[n, (c, a, b), Q, P], and w[k, c, t sh + a, u sw + b] -> w'[k, (c, a, b), t, u]
    (zero past the kernel), cropped to the output's size. `pads`: (top, bottom, left, right); `weight` [K, C /
    groups, R, S] a constant. The group of channel (c, a, b) is c's. `out_shape` None: [N, K, H', W']."""
    from tvm import relax

    n, c, h, w = data
    (sh, sw), (top, bottom, left, right) = strides, pads
    k, cg, r, s = weight.shape
    hq, wq, rq, sq = -(-(h + top + bottom) // sh), -(-(w + left + right) // sw), -(-r // sh), -(-s // sw)
    oh, ow = (h + top + bottom - r) // sh + 1, (w + left + right - s) // sw + 1
    pads = (0, 0, 0, 0, top, hq * sh - h - top, left, wq * sw - w - left)
    steps = ((("pad", pads),) if any(pads) else ()) + (
        ("reshape", (n, c, hq, sh, wq, sw)), ("permute", (0, 1, 3, 5, 2, 4)), ("reshape", (n, c * sh * sw, hq, wq)))
    full = np.zeros((k, cg, rq * sh, sq * sw), weight.dtype)
    full[:, :, :r, :s] = weight
    phased = full.reshape(k, cg, rq, sh, sq, sw).transpose(0, 1, 3, 5, 2, 4).reshape(k, cg * sh * sw, rq, sq)
    p = {"N": n, "C": c * sh * sw, "H": hq, "W": wq, "K": k, "R": rq, "S": sq}
    task = make_task("conv2d", p, target=target) if groups == 1 else make_task(
        "group_conv2d", {**p, "groups": groups}, target=target)
    crop = (("crop", (2, 3), (0, 0), (oh, ow)),) if (hq - rq + 1, wq - sq + 1) != (oh, ow) else ()
    return Site(task, (n, c * sh * sw, hq, wq), phased.shape, out_shape or (n, k, oh, ow),
                weight=relax.const(np.ascontiguousarray(phased)), data_steps=steps, out_steps=crop)


def transposed_weight(weight: np.ndarray, strides: tuple[int, int], groups: int = 1) -> np.ndarray:
    """The conv2d kernel [K * sh * sw, C, ceil(R / sh), ceil(S / sw)] that computes a transposed convolution of
    kernel `weight` [C, K, R, S] and `strides` (sh, sw) as sh * sw output phases of a convolution, stride 1, over
    its input padded by (ceil(R / sh) - 1, ceil(S / sw) - 1) before: channel (k, a, b) of that convolution at
    (Q, P) is the transposed one's output at (Q * sh + a, P * sw + b) before its padding is cropped.
    (Output q = Q * sh + a sums x[Q - t] * w[a + sh * t]; flipped, that is a correlation with
    v_a[u] = w[a + sh * (R' - 1 - u)], zero past R.)
    Grouped ([C, K / groups, R, S]): each group's kernel so, one after the other, [K * sh * sw, C / groups, ..] of
    a grouped convolution whose channel (k, a, b) is in group k // (K / groups), as the transposed one's k is."""
    if groups > 1:
        return np.concatenate([transposed_weight(part, strides) for part in np.split(weight, groups)])
    sh, sw = strides
    c, k, r, s = weight.shape
    rs, ss = -(-r // sh), -(-s // sw)
    full = np.zeros((c, k, rs * sh, ss * sw), weight.dtype)
    full[:, :, :r, :s] = weight
    # full[c, k, a + sh * t, b + sw * t'] -> [k, a, b, c, t, t'], then t flipped
    phases = full.reshape(c, k, rs, sh, ss, sw).transpose(1, 3, 5, 0, 2, 4)[..., ::-1, ::-1]
    return np.ascontiguousarray(phases.reshape(k * sh * sw, c, rs, ss))


def _dilated(weight: np.ndarray, dilation: tuple[int, int]) -> np.ndarray:
    """Kernel [.., R, S] at `dilation` (dh, dw) as the undilated kernel [.., dh (R - 1) + 1, dw (S - 1) + 1] with
    zeros between its taps."""
    (dh, dw), (r, s) = dilation, weight.shape[2:]
    out = np.zeros((*weight.shape[:2], dh * (r - 1) + 1, dw * (s - 1) + 1), weight.dtype)
    out[:, :, ::dh, ::dw] = weight
    return out


def _constant(expr: Any, lookup: Callable[[Any], Any]) -> Any:
    from tvm import ir, relax

    value = lookup(expr) if isinstance(expr, relax.Var) else expr
    return value if isinstance(value, ir.Constant) else None


def _conv_transpose_site(call: Any, target: dict, lookup: Callable[[Any], Any]) -> Site | Skipped:
    """A transposed convolution as a conv2d over its input (see `transposed_weight`), shuffled and cropped."""
    from tvm import relax

    a = call.attrs
    one_d = call.op.name == "relax.nn.conv1d_transpose"
    data, weight, out = _shape(call.args[0]), _shape(call.args[1]), _shape(call)
    what = f"{'conv1d' if one_d else 'conv2d'}_transpose data={data} weight={weight}"
    why = _unsupported(call, (data, weight, out), ("NCW", "IOW", "NCW") if one_d else ("NCHW", "IOHW", "NCHW"))
    if why:
        return Skipped(what, why)
    const = _constant(call.args[1], lookup)
    if const is None:
        return Skipped(what, "weight is not a constant")
    strides, padding, dilation = (tuple(int(v) for v in x) for x in (a.strides, a.padding, a.dilation))
    w = const.value.numpy()
    if one_d:  # height 1
        data, w, out = (*data[:2], 1, data[2]), w[:, :, None, :], (*out[:2], 1, out[2])
        strides, padding, dilation = (1, strides[0]), (0, padding[0]), (1, dilation[0])
    dil = 1  # of the conv2d: stride 1 is a conv2d of the flipped kernel at the same dilation
    if strides == (1, 1) and len(set(dilation)) == 1:
        dil = dilation[0]
    elif dilation != (1, 1):  # strided: the kernel with zeros between its taps, undilated
        w = _dilated(w, dilation)
    n, c, h, wd = data
    (sh, sw), (top, left) = strides, padding[:2]
    rs, ss = -(-w.shape[2] // sh), -(-w.shape[3] // sw)
    extra_h = max(0, -(-(top + out[2]) // sh) - h)  # rows the output's last phase rows need past the input
    extra_w = max(0, -(-(left + out[3]) // sw) - wd)
    pads = (dil * (rs - 1), extra_h, dil * (ss - 1), extra_w)
    uniform = len(set(pads)) == 1
    steps, (_, _, h, wd) = ((), data) if uniform else _plane_pad(data, pads, one_d)
    groups = int(a.groups)
    k = w.shape[1] * groups
    p = {"N": n, "C": c, "H": h, "W": wd, "K": k * sh * sw, "R": rs, "S": ss, "padding": pads[0] if uniform else 0}
    if groups == 1:
        task = make_task("conv2d", {**p, "dilation": dil}, target=target)
    elif groups == c == p["K"] and dil == 1:  # depthwise, stride 1
        task = make_task("depthwise_conv2d", {key: v for key, v in p.items() if key != "K"}, target=target)
    else:  # a depthwise upsampling (FCN's bilinear one) has sh * sw outputs per channel: grouped
        task = make_task("group_conv2d", {**p, "groups": groups, "dilation": dil}, target=target)
    _, _, ph, pw = task.opdef.output_shape(task.shape)  # phases [N, K * sh * sw, ph, pw]
    shuffle = (("reshape", (n, k, sh, sw, ph, pw)), ("permute", (0, 1, 4, 2, 5, 3)),
               ("reshape", (n, k, ph * sh, pw * sw)), ("crop", (2, 3), (top, left), (top + out[2], left + out[3])))
    return Site(task, (n, c, h, wd), (p["K"], c // groups, rs, ss), _shape(call),
                weight=relax.const(transposed_weight(w, (sh, sw), groups)), data_steps=steps, out_steps=shuffle)


def constant_weight(expr: Any, lookup: Callable[[Any], Any]) -> Any:
    """W [N, K] when `expr` (or the value `lookup` finds bound to it) is permute_dims of a constant W:
    how torch.export writes the weight operand of a linear layer. None otherwise."""
    from tvm import ir, relax

    value = lookup(expr) if isinstance(expr, relax.Var) else expr
    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.permute_dims":
        return None
    src, axes = value.args[0], value.attrs.axes
    if not isinstance(src, ir.Constant) or len(src.value.shape) != 2:
        return None
    return src if axes is None or [int(a) for a in axes] == [1, 0] else None


def _matmul_site(call: Any, target: dict, lookup: Callable[[Any], Any]) -> Site | Skipped:
    a, b = _shape(call.args[0]), _shape(call.args[1])
    what = f"matmul {a} @ {b}"
    if a is None or b is None:
        return Skipped(what, "dynamic shape")
    if _type_problem(call):
        return Skipped(what, _type_problem(call))
    if len(a) < 2 or len(b) < 2:
        return Skipped(what, "vector operand (rank 1)")
    out = _shape(call)
    k = a[-1]
    if len(b) == 2:
        m = math.prod(a[:-1])
        weight = constant_weight(call.args[1], lookup)
        if weight is not None:
            task = make_task("dense", {"batch": m, "in_features": k, "out_features": b[1]}, target=target)
            return Site(task, (m, k), (b[1], k), out, weight=weight)
        task = make_task("matmul", {"M": m, "N": b[1], "K": k}, target=target)
        return Site(task, (m, k), b, out)
    if len(a) == len(b) and a[:-2] == b[:-2]:
        batch = math.prod(a[:-2])
        task = make_task("batch_matmul", {"B": batch, "M": a[-2], "N": b[-1], "K": k}, target=target)
        return Site(task, (batch, a[-2], k), (batch, k, b[-1]), out)
    return Skipped(what, "broadcast batch dimensions")


def classify(call: Any, target: dict, lookup: Callable[[Any], Any] = lambda var: None) -> Site | Skipped | None:
    """Site for a tunable call, Skipped for a conv/matmul autotune cannot take, None otherwise.
    `lookup(var)`: the value bound to a variable of the function, if known. A call whose task has no template for
    the target (a grouped convolution on CUDA) is Skipped."""
    product, dtype = product_call(call, lookup)
    site = SITES.get(getattr(product.op, "name", "")) if product is not None else None
    found = site(product, target, lookup) if site is not None else None
    if not isinstance(found, Site):
        return found
    if dtype != "float32":  # the same site, its task in the model's type
        try:
            found = replace(found, task=make_task(found.task.op, found.task.shape, dtype, target=target))
        except AutotuneError as err:
            return Skipped(str(replace(found.task, dtype=dtype)), str(err))
    task = found.task
    ref = task.opdef.templates.get(task.target_kind)
    if ref is None:
        return Skipped(str(task), f"no {task.target_kind} template for {task.op}")
    if task.target_kind == "cuda" and not _fits_gpu(task, ref):
        return Skipped(str(task), f"no config of {ref} seen within the GPU's limits (e.g. a warp of threads)")
    return found


SITES = {"relax.nn.conv2d": _conv_site, "relax.nn.conv1d": _conv_site, "relax.nn.conv3d": _conv3d_site,
         "relax.nn.conv2d_transpose": _conv_transpose_site, "relax.nn.conv1d_transpose": _conv_transpose_site,
         "relax.matmul": _matmul_site}  # Relax op -> its site (a product autotune may compute)


@functools.lru_cache(maxsize=1024)
def _fits_gpu(task: Task, ref: str) -> bool:
    """Whether a config of the task's CUDA template fits the GPU (one of the default candidates does; a GEMV of
    batch 1 over 1000 outputs does not: at most 25 threads a block). Such a task is left to TVM's DLight rules."""
    return bool(default_candidates(resolve(ref), task))


def find_sites(mod: Any, target: dict) -> tuple[list[Site], list[Skipped]]:
    """Every tunable call of the Relax module's functions, in program order."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    sites: list[Site] = []
    skipped: list[Skipped] = []

    bound: dict[Any, Any] = {}

    @visitor
    class _Finder(PyExprVisitor):
        def visit_var_binding_(self, binding: Any) -> None:
            bound[binding.var] = binding.value
            super().visit_var_binding_(binding)

        def visit_call_(self, call: Any) -> None:
            super().visit_call_(call)
            found = classify(call, target, bound.get)
            if isinstance(found, Site):
                sites.append(found)
            elif isinstance(found, Skipped):
                skipped.append(found)

    finder = _Finder()
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            finder.visit_expr(func)
    return sites, skipped


def merge_sites(sites: list[Site]) -> list[tuple[Task, int]]:
    """Tasks by key, in order of first appearance, weighted by their number of calls."""
    weights: dict[str, int] = {}
    tasks: dict[str, Task] = {}
    for s in sites:
        tasks.setdefault(s.task.key, s.task)
        weights[s.task.key] = weights.get(s.task.key, 0) + 1
    return [(tasks[k], weights[k]) for k in tasks]


def resolve_target(target: str | dict) -> dict:
    """Target dict of a user's target spec (llvm or cuda)."""
    from ..target import parse_target

    return parse_target(target)


def extract_tasks(model: Any, inputs: Any = None, target: str | dict = "llvm",
                  via: str = "auto", left: list[str] | None = None,
                  allow_pickle: bool = False) -> list[tuple[Task, int]]:
    """Tunable tasks of a model (reference, module or Captured) with their call counts.

    via: "export" (torch.export, the whole program), "compile" (every graph torch.compile captures,
    for programs torch.export cannot take whole or TVM cannot import whole), or "auto" (export, else compile).
    An ExportedProgram (or .pt2) with a symbolic input size gives its dynamic sites' uKernel tasks instead
    (`autotune.dynamic.sites.ukernel_tasks`: on a CPU each site's tallest, weighted by the site's time over the
    size's range in calls of it).
    left: if given, gets a line ("what: why") per call of a tunable kind that is left to TVM.
    allow_pickle: load a `.pt2` that runs code when loaded (see `capture.load_program`).
    """
    if via not in ("export", "compile", "auto"):
        raise AutotuneError(f"via must be export, compile or auto, not {via!r}")
    from ..dynamic.sites import dynamic_program, dynamic_tasks

    program = None if isinstance(model, Captured) else dynamic_program(model)
    if program is not None:  # a symbolic size: the uKernels of its dynamic sites (`autotune.dynamic.sites`)
        return dynamic_tasks(program, resolve_target(target), name=str(model)[:80])
    if isinstance(model, Captured):
        captured = model
    elif via == "compile":
        return _collected_tasks(collect_tasks(model, inputs, target), left)
    else:
        try:
            captured = capture(model, inputs, allow_pickle)
        except (ExportFailed, ImportFailed) as err:
            if via == "export":
                raise
            try:
                collected = collect_tasks(model, inputs, target)
            except AutotuneError as again:  # both ways failed: one line with both reasons
                raise AutotuneError(f"{err}; through torch.compile: {again}") from None
            print(f"{err}; extracted the graphs torch.compile captures instead", file=sys.stderr)
            return _collected_tasks(collected, left)
    sites, skipped = find_sites(captured.mod, resolve_target(target))
    if left is not None:
        left.extend(f"{s.what}: {s.reason}" for s in skipped)
    return merge_sites(sites)


def _collected_tasks(collected: Collected, left: list[str] | None) -> list[tuple[Task, int]]:
    if left is not None:
        left.extend(collected.left)
    return collected.tasks


@dataclass
class Collected:
    """Tasks of every graph Dynamo captured in one run of the example inputs."""

    tasks: list[tuple[Task, int]]  # weight: calls during the run, summed over all graphs
    graphs: int  # graphs Dynamo handed over
    calls: int  # graph calls during the run
    skipped: list[str]  # graphs whose tasks are unknown, and why
    left: list[str] = field(default_factory=list)  # calls of tunable kinds left to TVM, and why (once per graph)


def collect_tasks(model: Any, inputs: Any = None, target: str | dict = "llvm") -> Collected:
    """Run the model once under torch.compile with a backend that records each graph's tunable calls."""
    import warnings

    import torch

    from .capture import _why, import_program, load_factory
    from .fx_graph import Refused, call_key, export_graph, graph_label, static_inputs
    from .partition import split_for_tvm

    tgt = resolve_target(target)
    name = type(model).__name__
    if isinstance(model, (str, Path)):
        name = str(model)
        model, example = load_factory(name)
        inputs = inputs if inputs is not None else example
    if not isinstance(model, torch.nn.Module) or inputs is None:
        raise AutotuneError("extraction through torch.compile needs a torch.nn.Module (or file.py:factory) "
                            "and example inputs")
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    sites: list[Site] = []
    out = Collected([], 0, 0, [])

    def backend(gm: Any, example_inputs: Any) -> Any:
        label, by_key, split = graph_label(gm), {}, None
        out.graphs += 1

        def run(*args: Any) -> Any:
            nonlocal split
            static = static_inputs(gm, args)
            key = call_key(args, static)
            if key not in by_key:
                by_key[key] = []
                try:
                    exported = None if split else export_graph(gm, args, static)  # a split: decided once
                    if split is None:  # as the backend does: split where one build cannot take it whole
                        made = split_for_tvm(gm, exported, lambda segment: backend(segment, None))
                        split = made[0] if made else False
                    if split:
                        by_key[key] = None  # the segments are graphs of their own
                    else:
                        captured = import_program(exported.program, [args[i] for i in exported.user], "the graph")
                        by_key[key], skipped = find_sites(captured.mod, tgt)
                        out.left.extend(f"{label}: {s.what}: {s.reason}" for s in skipped)
                except Refused as why:
                    out.skipped.append(f"{label}: {why.reason}")
                except AutotuneError as err:
                    out.skipped.append(f"{label}: {err}")
            if by_key[key] is None:  # the segments record their own calls
                return split(*args)
            out.calls += 1
            sites.extend(by_key[key])
            return gm(*args)

        return run

    compiled = torch.compile(evaluating(model), backend=backend)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled(*inputs)
        except Exception as err:  # noqa: BLE001 - the model's own code (its forward) failing becomes one line
            raise AutotuneError(f"model {name}: running it under torch.compile failed: {_why(err)}") from None
    out.tasks = merge_sites(sites)
    return out
