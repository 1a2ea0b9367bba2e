"""Tunable operators: parameters, TE compute definition, numpy reference and FLOP count.

Block names are part of the contract with `search_spaces/`: the main computation is
always the block "C" (GEMM family) or "conv" (convolutions); a zero-padding block, when
the convolution pads, is "pad".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import AutotuneError

Params = dict[str, int]


@dataclass(frozen=True)
class OpDef:
    """One operator: parameter names (with defaults), shapes, TE compute, numpy reference."""

    name: str
    doc: str
    params: tuple[str, ...]
    defaults: dict[str, int]
    input_shapes: Callable[[Params], list[tuple[int, ...]]]
    output_shape: Callable[[Params], tuple[int, ...]]
    compute: Callable[[Params, str], list]  # -> [inputs..., output] te tensors
    reference: Callable[[Params, list[np.ndarray]], np.ndarray]
    flops: Callable[[Params], float]
    check: Callable[[Params], str | None] = lambda p: None  # why a shape is impossible beyond sizes < 1, or None

    def complete(self, given: Params) -> Params:
        """Fill defaults, reject unknown/missing/impossible parameters."""
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise AutotuneError(
                f"unknown parameter(s) {', '.join(unknown)} for {self.name}; valid: {', '.join(self.params)}")
        out = {**self.defaults, **given}
        missing = [p for p in self.params if p not in out]
        if missing:
            raise AutotuneError(f"missing parameter(s) {', '.join(missing)} for {self.name}; "
                                f"needs: {self.signature()}")
        out = {p: int(out[p]) for p in self.params}
        lower = {"padding": 0}
        for p, v in out.items():
            if v < lower.get(p, 1):
                raise AutotuneError(f"impossible shape for {self.name}: {p}={v} must be >= {lower.get(p, 1)}")
        for dim in self.output_shape(out):
            if dim < 1:
                raise AutotuneError(f"impossible shape for {self.name}: output would be {self.output_shape(out)}")
        problem = self.check(out)
        if problem:
            raise AutotuneError(f"impossible shape for {self.name}: {problem}")
        return out

    def signature(self) -> str:
        return ", ".join(f"{p}={self.defaults[p]}" if p in self.defaults else p for p in self.params)


def _conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# ---- GEMM family -------------------------------------------------------------------------

def _matmul_compute(p: Params, dtype: str):
    from tvm import te
    A = te.placeholder((p["M"], p["K"]), dtype, name="A")
    B = te.placeholder((p["K"], p["N"]), dtype, name="B")
    k = te.reduce_axis((0, p["K"]), name="k")
    C = te.compute((p["M"], p["N"]), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _dense_compute(p: Params, dtype: str):
    from tvm import te
    X = te.placeholder((p["batch"], p["in_features"]), dtype, name="X")
    W = te.placeholder((p["out_features"], p["in_features"]), dtype, name="W")
    k = te.reduce_axis((0, p["in_features"]), name="k")
    C = te.compute((p["batch"], p["out_features"]), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="C")
    return [X, W, C]


def _batch_matmul_compute(p: Params, dtype: str):
    from tvm import te
    A = te.placeholder((p["B"], p["M"], p["K"]), dtype, name="A")
    B = te.placeholder((p["B"], p["K"], p["N"]), dtype, name="Bm")
    k = te.reduce_axis((0, p["K"]), name="k")
    C = te.compute((p["B"], p["M"], p["N"]), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B, C]


# ---- convolutions ------------------------------------------------------------------------

def _pad(data, padding: int):
    from tvm import te, tirx
    if padding == 0:
        return data
    n, c, h, w = (int(d) for d in data.shape)
    return te.compute(
        (n, c, h + 2 * padding, w + 2 * padding),
        lambda a, b, y, x: tirx.if_then_else(
            tirx.all(y >= padding, y < h + padding, x >= padding, x < w + padding),
            data[a, b, y - padding, x - padding], tirx.const(0.0, data.dtype)),
        name="pad")


def _conv2d_compute(p: Params, dtype: str):
    """conv2d, and group_conv2d ("groups" in p): output channel k reads the input channels of its group,
    (k // (K / groups)) * (C / groups) + c."""
    from tvm import te
    groups = p.get("groups", 1)
    cg, kg = p["C"] // groups, p["K"] // groups
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), dtype, name="data")
    weight = te.placeholder((p["K"], cg, p["R"], p["S"]), dtype, name="weight")
    padded = _pad(data, p["padding"])
    st, dl = p["stride"], p["dilation"]
    c = te.reduce_axis((0, cg), name="c")
    r = te.reduce_axis((0, p["R"]), name="r")
    s = te.reduce_axis((0, p["S"]), name="s")
    channel = (lambda k: c) if groups == 1 else (lambda k: k // kg * cg + c)
    conv = te.compute(
        _conv2d_out(p),
        lambda n, k, y, x: te.sum(padded[n, channel(k), y * st + r * dl, x * st + s * dl] * weight[k, c, r, s],
                                  axis=[c, r, s]),
        name="conv")
    return [data, weight, conv]


def _conv2d_out(p: Params) -> tuple[int, ...]:
    return (p["N"], p["K"], _conv_out(p["H"], p["R"], p["stride"], p["padding"], p["dilation"]),
            _conv_out(p["W"], p["S"], p["stride"], p["padding"], p["dilation"]))


def _group_conv2d_check(p: Params) -> str | None:
    for ch in ("C", "K"):
        if p[ch] % p["groups"]:
            return f"groups={p['groups']} does not divide {ch}={p[ch]}"
    return None


def _depthwise_compute(p: Params, dtype: str):
    from tvm import te
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), dtype, name="data")
    weight = te.placeholder((p["C"], 1, p["R"], p["S"]), dtype, name="weight")
    padded = _pad(data, p["padding"])
    st = p["stride"]
    r = te.reduce_axis((0, p["R"]), name="r")
    s = te.reduce_axis((0, p["S"]), name="s")
    conv = te.compute(
        _depthwise_out(p),
        lambda n, c, y, x: te.sum(padded[n, c, y * st + r, x * st + s] * weight[c, 0, r, s], axis=[r, s]),
        name="conv")
    return [data, weight, conv]


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


OPS: dict[str, OpDef] = {
    op.name: op
    for op in [
        OpDef("matmul", "C[M,N] = A[M,K] @ B[K,N]", ("M", "N", "K"), {},
              lambda p: [(p["M"], p["K"]), (p["K"], p["N"])], lambda p: (p["M"], p["N"]),
              _matmul_compute, lambda p, a: a[0] @ a[1], lambda p: 2.0 * p["M"] * p["N"] * p["K"]),
        OpDef("dense", "PyTorch linear without bias: Y[batch,out] = X[batch,in] @ W[out,in]^T",
              ("batch", "in_features", "out_features"), {},
              lambda p: [(p["batch"], p["in_features"]), (p["out_features"], p["in_features"])],
              lambda p: (p["batch"], p["out_features"]),
              _dense_compute, lambda p, a: a[0] @ a[1].T,
              lambda p: 2.0 * p["batch"] * p["in_features"] * p["out_features"]),
        OpDef("batch_matmul", "C[B,M,N] = A[B,M,K] @ B[B,K,N]", ("B", "M", "N", "K"), {},
              lambda p: [(p["B"], p["M"], p["K"]), (p["B"], p["K"], p["N"])], lambda p: (p["B"], p["M"], p["N"]),
              _batch_matmul_compute, lambda p, a: a[0] @ a[1], lambda p: 2.0 * p["B"] * p["M"] * p["N"] * p["K"]),
        OpDef("conv2d", "NCHW convolution, weight [K,C,R,S]",
              ("N", "C", "H", "W", "K", "R", "S", "stride", "padding", "dilation"),
              {"N": 1, "stride": 1, "padding": 0, "dilation": 1},
              lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["K"], p["C"], p["R"], p["S"])], _conv2d_out,
              _conv2d_compute, _conv2d_reference,
              lambda p: 2.0 * np.prod(_conv2d_out(p)) * p["C"] * p["R"] * p["S"]),
        OpDef("group_conv2d", "NCHW grouped convolution, weight [K,C/groups,R,S] (ResNeXt, RegNet)",
              ("N", "C", "H", "W", "K", "R", "S", "groups", "stride", "padding", "dilation"),
              {"N": 1, "stride": 1, "padding": 0, "dilation": 1},
              lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["K"], p["C"] // p["groups"], p["R"], p["S"])],
              _conv2d_out, _conv2d_compute, _group_conv2d_reference,
              lambda p: 2.0 * np.prod(_conv2d_out(p)) * (p["C"] // p["groups"]) * p["R"] * p["S"],
              _group_conv2d_check),
        OpDef("depthwise_conv2d", "NCHW depthwise convolution (multiplier 1), weight [C,1,R,S]",
              ("N", "C", "H", "W", "R", "S", "stride", "padding"), {"N": 1, "stride": 1, "padding": 0},
              lambda p: [(p["N"], p["C"], p["H"], p["W"]), (p["C"], 1, p["R"], p["S"])], _depthwise_out,
              _depthwise_compute, _depthwise_reference,
              lambda p: 2.0 * np.prod(_depthwise_out(p)) * p["R"] * p["S"]),
    ]
}


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise AutotuneError(f"unknown operator {name!r}; choose one of: {', '.join(OPS)}") from None


def random_inputs(op: OpDef, params: Params, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs in [-1, 1): the same for the same task, in every process."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=shape).astype(dtype) for shape in op.input_shapes(params)]


def check_output(out: np.ndarray, ref: np.ndarray, reduction: int) -> str | None:
    """None when `out` matches `ref` within fp32 round-off for a sum of `reduction` terms, else why not."""
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(out)):
        return "output has NaN/Inf"
    tol = 1e-5 * max(1.0, np.sqrt(reduction)) * max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    return None if err <= tol else f"max abs error {err:.3g} > tolerance {tol:.3g}"


def reduction_size(op: OpDef, params: Params) -> int:
    """Terms summed per output element (sets the correctness tolerance)."""
    return max(1, int(op.flops(params) / 2 / np.prod(op.output_shape(params))))
