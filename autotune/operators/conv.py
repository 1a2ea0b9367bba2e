"""NCHW convolutions: conv2d, group_conv2d and depthwise_conv2d. Main block "conv"; "pad" when they pad."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .definition import OpDef, Params, RowSplit
from .dtypes import element_type, in_type, output_of


def _conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _pad(data, padding: int):
    from tvm import te, tirx
    if padding == 0:
        return data
    n, c, h, w = (int(d) for d in data.shape)
    return te.compute(
        (n, c, h + 2 * padding, w + 2 * padding),
        lambda a, b, y, x: tirx.if_then_else(
            tirx.all(y >= padding, y < h + padding, x >= padding, x < w + padding),
            data[a, b, y - padding, x - padding], tirx.const(0, data.dtype)),
        name="pad")


def _conv2d_compute(p: Params, dtype: str):
    """conv2d, and group_conv2d ("groups" in p): output channel k reads the input channels of its group,
    (k // (K / groups)) * (C / groups) + c. Products are summed in the dtype's accumulation type ("conv"), rounded
    to its output type in "conv_out" where that differs (bfloat16)."""
    from tvm import te
    kind = element_type(dtype)
    acc = kind.accumulate
    groups = p.get("groups", 1)
    cg, kg = p["C"] // groups, p["K"] // groups
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), kind.storage, name="data")
    weight = te.placeholder((p["K"], cg, p["R"], p["S"]), kind.storage, name="weight")
    padded = _pad(data, p["padding"])
    st, dl = p["stride"], p["dilation"]
    c = te.reduce_axis((0, cg), name="c")
    r = te.reduce_axis((0, p["R"]), name="r")
    s = te.reduce_axis((0, p["S"]), name="s")
    channel = (lambda k: c) if groups == 1 else (lambda k: k // kg * cg + c)
    conv = te.compute(
        _conv2d_out(p),
        lambda n, k, y, x: te.sum(in_type(padded[n, channel(k), y * st + r * dl, x * st + s * dl], acc)
                                  * in_type(weight[k, c, r, s], acc), axis=[c, r, s]),
        name="conv")
    return [data, weight, output_of(conv, dtype, "conv_out")]


def _conv2d_out(p: Params) -> tuple[int, ...]:
    return (p["N"], p["K"], _conv_out(p["H"], p["R"], p["stride"], p["padding"], p["dilation"]),
            _conv_out(p["W"], p["S"], p["stride"], p["padding"], p["dilation"]))


def _group_conv2d_check(p: Params) -> str | None:
    for ch in ("C", "K"):
        if p[ch] % p["groups"]:
            return f"groups={p['groups']} does not divide {ch}={p[ch]}"
    return None


def _depthwise_compute(p: Params, dtype: str):
    """Products summed in the dtype's accumulation type ("conv"), rounded in "conv_out" where it differs."""
    from tvm import te
    kind = element_type(dtype)
    acc = kind.accumulate
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), kind.storage, name="data")
    weight = te.placeholder((p["C"], 1, p["R"], p["S"]), kind.storage, name="weight")
    padded = _pad(data, p["padding"])
    st = p["stride"]
    r = te.reduce_axis((0, p["R"]), name="r")
    s = te.reduce_axis((0, p["S"]), name="s")
    conv = te.compute(
        _depthwise_out(p),
        lambda n, c, y, x: te.sum(in_type(padded[n, c, y * st + r, x * st + s], acc) * in_type(weight[c, 0, r, s], acc),
                                  axis=[r, s]),
        name="conv")
    return [data, weight, output_of(conv, dtype, "conv_out")]


def _depthwise_out(p: Params) -> tuple[int, ...]:
    return (p["N"], p["C"], _conv_out(p["H"], p["R"], p["stride"], p["padding"]),
            _conv_out(p["W"], p["S"], p["stride"], p["padding"]))


def _windows(x: np.ndarray, p: Params, dilation: int) -> np.ndarray:
    """[N, C, OH, OW, R, S] strided view of the zero-padded input."""
    pad = p["padding"]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    span_r, span_s = dilation * (p["R"] - 1) + 1, dilation * (p["S"] - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (span_r, span_s), axis=(2, 3))
    return win[:, :, ::p["stride"], ::p["stride"], ::dilation, ::dilation]


def _conv2d_reference(p: Params, arrays: list[np.ndarray]) -> np.ndarray:
    data, weight = arrays
    win = _windows(data, p, p["dilation"])  # N C OH OW R S
    out = np.tensordot(win, weight, axes=([1, 4, 5], [1, 2, 3]))  # N OH OW K
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _group_conv2d_reference(p: Params, arrays: list[np.ndarray]) -> np.ndarray:
    data, weight = arrays
    g = p["groups"]
    win = _windows(data, p, p["dilation"])  # N C OH OW R S
    win = win.reshape(win.shape[0], g, -1, *win.shape[2:])  # N G C/G OH OW R S
    out = np.einsum("ngcyxrs,gkcrs->ngkyx", win, weight.reshape(g, -1, *weight.shape[1:]), optimize=True)
    return np.ascontiguousarray(out.reshape(out.shape[0], -1, *out.shape[3:]))


def _depthwise_reference(p: Params, arrays: list[np.ndarray]) -> np.ndarray:
    data, weight = arrays
    win = _windows(data, p, 1)  # N C OH OW R S
    return np.einsum("ncyxrs,crs->ncyx", win, weight[:, 0], optimize=True)


def _conv_relax(groups: Callable[[Params], int]) -> Callable[[Params, list], object]:
    """relax.op.nn.conv2d with the operator's stride, padding, dilation and `groups(params)` groups."""
    def call(p: Params, operands: list):
        from tvm import relax
        return relax.op.nn.conv2d(*operands, strides=p["stride"], padding=p["padding"],
                                  dilation=p.get("dilation", 1), groups=groups(p))
    return call


def _legalized_blocks(sch, p: Params) -> dict[str, str]:
    """TVM's legalized convolution: its last block is "conv" ("conv2d_nchw", "group_conv2d_nchw"), its "pad_temp"
    is "pad" (inlined where the convolution does not pad: TVM copies the input there)."""
    conv = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))][-1]
    if p["padding"] == 0:
        sch.compute_inline(sch.get_sblock("pad_temp"))
    return {"conv": conv, "pad": "pad_temp"} if p["padding"] else {"conv": conv}


def _legalized_depthwise_blocks(sch, p: Params) -> dict[str, str]:
    """A grouped convolution of one channel per group: as `_legalized_blocks`, with its reduction loop of extent 1
    over the group's one input channel fused away (n, c, y, x, rc, ry, rx -> n, c, y, x, ry, rx)."""
    names = _legalized_blocks(sch, p)
    _, _, _, _, rc, ry, _ = sch.get_loops(sch.get_sblock(names["conv"]))
    sch.fuse(rc, ry)
    return names


CONV2D = OpDef(
    name="conv2d", doc="NCHW convolution, weight [K,C,R,S]",
    params=("N", "C", "H", "W", "K", "R", "S", "stride", "padding", "dilation"),
    defaults={"N": 1, "stride": 1, "padding": 0, "dilation": 1},
    input_shapes=lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["K"], p["C"], p["R"], p["S"])],
    output_shape=_conv2d_out, compute=_conv2d_compute, reference=_conv2d_reference,
    flops=lambda p: 2.0 * np.prod(_conv2d_out(p)) * p["C"] * p["R"] * p["S"],
    example="N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,padding=1",
    probe_shapes=({"C": 16, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "padding": 1},
                  {"C": 64, "H": 56, "W": 56, "K": 128, "R": 3, "S": 3, "stride": 2, "padding": 1}),
    templates={"llvm": "search_spaces.conv2d:CONV2D_CPU", "cuda": "search_spaces.cuda_conv2d:CONV2D_CUDA"},
    relax_call=_conv_relax(lambda p: 1), weights=(1,), legalized_blocks=_legalized_blocks,
    row_split=RowSplit("N", (True, False), rows_per_unit=1),
    narrow_probe_shapes=({"C": 64, "H": 14, "W": 14, "K": 64, "R": 3, "S": 3, "padding": 1},  # AMX's implicit GEMM
                         {"C": 64, "H": 7, "W": 7, "K": 48, "R": 1, "S": 1}),
)

GROUP_CONV2D = OpDef(
    name="group_conv2d", doc="NCHW grouped convolution, weight [K,C/groups,R,S] (ResNeXt, RegNet)",
    params=("N", "C", "H", "W", "K", "R", "S", "groups", "stride", "padding", "dilation"),
    defaults={"N": 1, "stride": 1, "padding": 0, "dilation": 1},
    input_shapes=lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["K"], p["C"] // p["groups"], p["R"], p["S"])],
    output_shape=_conv2d_out, compute=_conv2d_compute, reference=_group_conv2d_reference,
    flops=lambda p: 2.0 * np.prod(_conv2d_out(p)) * (p["C"] // p["groups"]) * p["R"] * p["S"],
    example="N=1,C=224,H=14,W=14,K=224,R=3,S=3,groups=28,padding=1",
    probe_shapes=({"C": 32, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "groups": 4, "padding": 1},
                  {"C": 128, "H": 28, "W": 28, "K": 128, "R": 3, "S": 3, "groups": 32, "stride": 2, "padding": 1}),
    templates={"llvm": "search_spaces.conv2d:GROUP_CONV2D_CPU",
               "cuda": "search_spaces.cuda_conv2d:GROUP_CONV2D_CUDA"},
    check=_group_conv2d_check,
    relax_call=_conv_relax(lambda p: p["groups"]), weights=(1,), legalized_blocks=_legalized_blocks,
)

DEPTHWISE_CONV2D = OpDef(
    name="depthwise_conv2d", doc="NCHW depthwise convolution (multiplier 1), weight [C,1,R,S]",
    params=("N", "C", "H", "W", "R", "S", "stride", "padding"), defaults={"N": 1, "stride": 1, "padding": 0},
    input_shapes=lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["C"], 1, p["R"], p["S"])],
    output_shape=_depthwise_out, compute=_depthwise_compute, reference=_depthwise_reference,
    flops=lambda p: 2.0 * np.prod(_depthwise_out(p)) * p["R"] * p["S"],
    example="N=1,C=144,H=56,W=56,R=3,S=3,stride=1,padding=1",
    probe_shapes=({"C": 16, "H": 14, "W": 14, "R": 3, "S": 3, "padding": 1},
                  {"C": 96, "H": 56, "W": 56, "R": 3, "S": 3, "stride": 2, "padding": 1}),
    templates={"llvm": "search_spaces.depthwise_conv2d:DEPTHWISE_CPU",
               "cuda": "search_spaces.cuda_depthwise:DEPTHWISE_CUDA"},
    relax_call=_conv_relax(lambda p: p["C"]), weights=(1,), legalized_blocks=_legalized_depthwise_blocks,
)
