"""Rewrites of an exported ATen program where TVM 0.27's importer disagrees with PyTorch.

Each fix keeps PyTorch's semantics exactly; the backend still checks every build against eager.
  - decompositions for fused fast-path kernels Dynamo captures in eval mode and for `any` over all dimensions
    (no TVM importer);
  - torch.cat skips 1-d empty tensors (an empty KV cache), TVM's concat rejects them;
  - cumsum of bool/int tensors returns int64 in PyTorch, TVM keeps the input dtype;
  - select with a negative index (Falcon's `qkv[..., -1, :]`) counts from the end in PyTorch, TVM imports it as a
    `take` in "fast" mode, which reads before the tensor's start;
  - advanced indexing after sliced dimensions (`x[:, :, i, j]`, `F.unfold`'s decomposition, ConvBERT): TVM broadcasts
    its aranges for the sliced dimensions against the index tensors, which is not PyTorch's result (and fails when
    their shapes differ); the sliced dimensions get explicit arange indices of PyTorch's result layout instead;
  - arange with a negative step (Funnel's relative positions, `arange(16, -16, -1)`): TVM's has two elements too
    many; it is computed as start + step * arange(count);
  - an integer tensor times (plus, ...) a Python float is a float tensor in PyTorch (a float arange decomposes so),
    TVM keeps the integer dtype and truncates the float: the tensor is cast first;
  - a floating tensor to the power 2 or 3 (GPT-2's GELU, `torch.pow(x, 3.0)`): PyTorch computes x * x (* x), TVM
    calls the C library's scalar powf on every element: the products, as PyTorch's;
  - an integer tensor divided by a Python int with a rounding mode (`x // 2`): TVM makes the int an int32
    constant and refuses to divide an int64 tensor by it: the int becomes a tensor of the tensor's dtype;
  - `x[mask] = v` with a bool mask over x's leading dimensions (Longformer): TVM's index_put takes integer indices
    only; it is where(mask, v, x);
  - as_strided other than a contiguous view (Longformer's overlapping windows, of a transposed tensor too) fails
    TVM's importer, and unfold (frames of a signal, `Tensor.unfold`) has none: both gather from the flattened tensor
    (its dimensions first put in storage order) at indices built from aranges (offset + sum of index_d * stride_d);
  - the real (or imaginary) part of FFTs of a real tensor (FNet's token mixing; TVM has no complex tensors): DFT
    matrices times the two parts, as real matmuls;
  - a tensor filled with inf or NaN (Longformer's `full_like(x, -inf)`, `torch.full`): TVM's legalization
    of `full` fails on one (topi.full tests `"float" in dtype` on a DataType); the fill is 0, the value added after;
  - a matrix product or convolution of bf16 (fp16) tensors: TVM sums it into a float32 result and keeps that type
    (a bias of the tensors' type added to it fails to import), PyTorch rounds the sums to the tensors' type: the
    product is cast back to it and its bias added after the cast;
  - layer_norm of bf16 tensors: TVM's takes float32 and float16 only; PyTorch normalises in float32 and rounds the
    result: so is it here;
  - a bmm by a 2-d tensor expanded over the batch (nn.MultiheadAttention's in-projection off its fast path:
    `linear` of a transposed 3-d input): one mm of the batch's rows by that tensor, which autotune takes as a dense
    layer where the tensor is a constant weight (TVM's importer makes a batched matmul of the copies).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def decompositions() -> dict[Any, Any]:
    """PyTorch's default decomposition table plus the fast-path kernels below."""
    table = torch.export.default_decompositions()
    table[aten._transformer_encoder_layer_fwd.default] = transformer_encoder_layer_fwd
    table[aten.any.default] = any_of_all  # TVM imports any over some dims only
    return table


def any_of_all(x: torch.Tensor) -> torch.Tensor:
    """torch.any(x) over every dimension, as TVM's importer takes it (any over dims)."""
    return torch.any(x.reshape(-1), dim=0)


def transformer_encoder_layer_fwd(src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
                                  qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                                  use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
                                  norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
                                  ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
                                  ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None,
                                  mask_type: int | None = None) -> torch.Tensor:
    """nn.TransformerEncoderLayer's fused eval-mode kernel (aten/src/ATen/native/transformers/transformer.cpp)."""
    if mask is not None or src.dim() != 3:
        raise NotImplementedError("fast-path encoder layer with a mask or unbatched input")
    batch, seq, _ = src.shape
    head = embed_dim // num_heads

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    def attention(x: torch.Tensor) -> torch.Tensor:
        qkv = F.linear(x, qkv_weight, qkv_bias).reshape(batch, seq, 3, num_heads, head).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(qkv[0], qkv[1].transpose(-1, -2)) / head ** 0.5
        out = torch.matmul(torch.softmax(scores, dim=-1), qkv[2]).transpose(1, 2).reshape(batch, seq, embed_dim)
        return F.linear(out, proj_weight, proj_bias)

    def ffn(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = src + attention(norm(src, norm_weight_1, norm_bias_1))
        return x + ffn(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attention(src), norm_weight_1, norm_bias_1)
    return norm(x + ffn(x), norm_weight_2, norm_bias_2)


FIXED = "autotune_fixed"  # the GraphModule.meta key `fix_graph` sets: fixed once, never again


def fix_graph(gm: torch.fx.GraphModule) -> None:
    """Apply the graph-level fixes in place (on a decomposed, core-ATen graph): each node's fix in FIXES (below).
    A graph already fixed is left as it is."""
    if gm.meta.get(FIXED):
        return
    gm.meta[FIXED] = True
    for node in gm.graph.nodes:
        fix = FIXES.get(node.target) if node.op == "call_function" else None
        if fix is not None:
            fix(gm.graph, node)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def _val(node: Any) -> Any:
    return getattr(node, "meta", {}).get("val")


def _insert(graph: torch.fx.Graph, before: torch.fx.Node, target: Any, args: tuple, val: torch.Tensor,
            kwargs: dict | None = None) -> torch.fx.Node:
    """A call of `target` inserted before `before`, with `val` (its result's example value) in its meta."""
    with graph.inserting_before(before):
        node = graph.call_function(target, args, kwargs or {})
    node.meta["val"] = val
    return node


def _arange_along(graph: torch.fx.Graph, node: torch.fx.Node, n: int, axis: int, ndim: int) -> torch.fx.Node:
    """arange(n) (int64) viewed with its n values along `axis` of `ndim` axes (1 on the others), inserted before
    `node`: one index of a broadcast index expression."""
    shape = [1] * ndim
    shape[axis] = n
    arange = _insert(graph, node, aten.arange.default, (n,), torch.arange(n), {"dtype": torch.int64})
    return _insert(graph, node, aten.view.default, (arange, shape), torch.arange(n).view(shape))


def _drop_empty_cat_inputs(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    parts = list(node.args[0])
    keep = [p for p in parts if not (isinstance(_val(p), torch.Tensor) and tuple(_val(p).shape) == (0,))]
    if keep and len(keep) < len(parts) and any(len(_val(p).shape) > 1 for p in keep):
        node.args = (keep, *node.args[1:])


def _cumsum_result_dtype(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    out, inp = _val(node), _val(node.args[0])
    if isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and out.dtype != inp.dtype \
            and "dtype" not in node.kwargs:
        node.kwargs = {**node.kwargs, "dtype": out.dtype}


def _select_from_start(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    data, dim, index = node.args
    shape = getattr(_val(data), "shape", None)
    if isinstance(index, int) and index < 0 and shape is not None and isinstance(shape[dim], int):
        node.args = (data, dim, index + shape[dim])


def _index_sliced_dimensions(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """x[:, .., :, i, j, ..] (p sliced dimensions, then index tensors) as x[a_0, .., a_p-1, i, j, ..], a_q the arange
    of dimension q laid along result axis q: PyTorch's result [d_0, .., d_p-1, *broadcast(i, j, ..), ...]."""
    data, indices = node.args[:2]
    p = next((q for q, index in enumerate(indices) if index is not None), len(indices))
    rest = indices[p:]
    if p == 0 or len(rest) < 2 or any(index is None for index in rest):
        return
    vals = [_val(index) for index in rest]
    shape = getattr(_val(data), "shape", None)
    if shape is None or not all(isinstance(v, torch.Tensor) for v in vals):
        return
    ndim = len(torch.broadcast_shapes(*(v.shape for v in vals)))
    aranges = [_arange_along(graph, node, int(shape[q]), 0, p - q + ndim) for q in range(p)]
    node.args = (data, [*aranges, *rest], *node.args[2:])


def _arange_counting_down(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    start, end, step = (list(node.args) + [1])[:3]
    out = _val(node)
    if not all(isinstance(v, (int, float)) for v in (start, end, step)) or step >= 0 \
            or not isinstance(out, torch.Tensor):
        return
    count = _insert(graph, node, aten.arange.start_step, (0, out.shape[0], 1),
                    torch.arange(0, out.shape[0], 1, dtype=out.dtype), {**node.kwargs, "dtype": out.dtype})
    scaled = _insert(graph, node, aten.mul.Tensor, (count, step), _val(count) * step)
    node.replace_all_uses_with(_insert(graph, node, aten.add.Tensor, (scaled, start), _val(scaled) + start))


def _float_scalar_promotes(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    out = _val(node)
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point \
            or not any(isinstance(a, float) for a in node.args):
        return
    args = list(node.args)
    for i, arg in enumerate(args):
        val = _val(arg)
        if isinstance(val, torch.Tensor) and not val.dtype.is_floating_point:
            args[i] = _insert(graph, node, aten._to_copy.default, (arg,), val.to(out.dtype), {"dtype": out.dtype})
    node.args = tuple(args)


def _small_power_as_products(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    x, exponent = node.args[:2]
    val = _val(x)
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or exponent not in (2, 3):
        return
    square = _insert(graph, node, aten.mul.Tensor, (x, x), val * val)
    node.replace_all_uses_with(square if exponent == 2 else
                               _insert(graph, node, aten.mul.Tensor, (square, x), _val(square) * val))


def _int_scalar_as_tensor(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    x, scalar = node.args[:2]
    val = _val(x)
    if not isinstance(scalar, int) or not isinstance(val, torch.Tensor) or val.dtype.is_floating_point:
        return
    tensor = _insert(graph, node, aten.scalar_tensor.default, (scalar,), torch.tensor(scalar, dtype=val.dtype),
                     {"dtype": val.dtype})
    node.args = (x, tensor, *node.args[2:])


def _masked_fill_as_where(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    data, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    x, v = _val(data), _val(values)
    mask = _val(indices[0]) if len(indices) == 1 and indices[0] is not None else None
    if accumulate or not all(isinstance(t, torch.Tensor) for t in (x, v, mask)) or mask.dtype != torch.bool \
            or tuple(mask.shape) != tuple(x.shape[:mask.ndim]) or v.ndim > x.ndim - mask.ndim:
        return
    shape = [*mask.shape, *[1] * (x.ndim - mask.ndim)]
    wide = _insert(graph, node, aten.view.default, (indices[0], shape), mask.view(shape))
    node.replace_all_uses_with(_insert(graph, node, aten.where.self, (wide, values, data),
                                       torch.where(_val(wide), v, x)))


def _as_strided_as_gather(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    data, size, stride = node.args[:3]
    offset = (node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")) or 0
    x = _val(data)
    if not isinstance(x, torch.Tensor) or not _all_ints(*size, *stride, offset, *x.shape, *x.stride()):
        return
    # as_strided reads x's storage: x with its dimensions in storage order (strides descending), flattened, is that
    # storage when x is dense (a permutation of a contiguous layout, as a transposed view is)
    order = sorted(range(x.ndim), key=lambda d: (-x.stride(d), d))
    dense = [x.stride(d) for d in order] == [math.prod(x.shape[e] for e in order[k + 1:]) for k in range(x.ndim)]
    if not dense:
        return
    offset -= x.storage_offset()
    view = offset == 0 and all(n == 1 or s == math.prod(size[d + 1:]) for d, (n, s) in enumerate(zip(size, stride)))
    if view and x.is_contiguous():  # TVM's importer takes a contiguous view as a reshape
        return
    if order != sorted(order):
        data = _insert(graph, node, aten.permute.default, (data, order), x.permute(order))
    _gather(graph, node, data, size, stride, offset)


def _unfold_as_gather(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    data, dim, width, step = node.args[:4]
    x = _val(data)
    if not isinstance(x, torch.Tensor) or not _all_ints(*x.shape, dim, width, step) or x.ndim == 0:
        return
    dim %= x.ndim
    strides = [math.prod(x.shape[d + 1:]) for d in range(x.ndim)]  # x's logical (row-major) strides
    size = [*x.shape[:dim], (x.shape[dim] - width) // step + 1, *x.shape[dim + 1:], width]
    _gather(graph, node, data, size, [*strides[:dim], strides[dim] * step, *strides[dim + 1:], strides[dim]], 0)


def _gather(graph: torch.fx.Graph, node: torch.fx.Node, data: torch.fx.Node, size: list[int], stride: list[int],
            offset: int) -> None:
    """Replace `node` by data.reshape(-1)[offset + sum_d arange(size_d) * stride_d] (the aranges broadcast along their
    own dimension), when every index falls inside data."""
    x = _val(data)
    low = offset + sum((n - 1) * s for n, s in zip(size, stride) if s < 0)
    high = offset + sum((n - 1) * s for n, s in zip(size, stride) if s > 0)
    if not size or min(size) < 1 or low < 0 or high >= x.numel():
        return
    flat = _insert(graph, node, aten.reshape.default, (data, [x.numel()]), x.reshape(-1))
    index = None
    for d, (n, s) in enumerate(zip(size, stride)):
        term = _arange_along(graph, node, n, d, len(size))
        term = _insert(graph, node, aten.mul.Tensor, (term, s), _val(term) * s)
        index = term if index is None else _insert(graph, node, aten.add.Tensor, (index, term),
                                                   _val(index) + _val(term))
    index = _insert(graph, node, aten.add.Tensor, (index, offset), _val(index) + offset)
    node.replace_all_uses_with(_insert(graph, node, aten.index.Tensor, (flat, [index]), _val(node)))


def _fft_as_matmuls(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """view_as_real of FFTs of a real tensor (FNet's `fftn(x).real`; TVM has no complex tensors): the real and
    imaginary parts carried as two real tensors (`_complex_parts`). A select of the real (imaginary) part takes R
    (I) itself."""
    parts = _complex_parts(graph, node, node.args[0])
    if parts is None:
        return
    re, im = parts
    im = im if im is not None else _insert(graph, node, aten.mul.Tensor, (re, 0.0), _val(re))
    last = _val(node).ndim - 1
    for user in list(node.users):
        if user.target is aten.select.int and user.args[1] in (-1, last) and user.args[2] in (0, 1, -1, -2):
            user.replace_all_uses_with(re if user.args[2] in (0, -2) else im)
    if node.users:
        node.replace_all_uses_with(_insert(graph, node, aten.stack.default, ([re, im], -1), _val(node)))


def _complex_parts(graph: torch.fx.Graph, node: torch.fx.Node, z: Any) -> tuple | None:
    """(R, I) of the complex tensor `z` as real tensors (I None for zero), when z comes from a real float32 tensor
    through casts to complex, FFTs (c2c, and r2c: one-sided too) and conjugates; else None. Each DFT along a
    dimension of length n is two matmuls by C = cos(2 pi j k / n) and S = sin(2 pi j k / n) (forward F = C - i S):
    (C - i S)(R + i I) = C R + S I + i (C I - S R). Cached in z's meta: a second view of z reuses them."""
    if not isinstance(z, torch.fx.Node):
        return None
    if "autotune_parts" in z.meta:
        return z.meta["autotune_parts"]
    x = z.args[0] if z.target in (aten._to_copy.default, aten._fft_r2c.default) else None
    real = isinstance(_val(x), torch.Tensor) and _val(x).dtype == torch.float32 and _all_ints(*_val(x).shape)
    if z.target is aten._to_copy.default and real:
        parts = (x, None)
    elif z.target is aten._fft_r2c.default and real:
        dims, norm, onesided = z.args[1:4]
        parts = _dfts(graph, node, (x, None), dims, norm, True, onesided)
    elif z.target in (aten._fft_c2c.default, aten._conj.default):
        parts = _complex_parts(graph, node, z.args[0])
        if parts is not None and z.target is aten._fft_c2c.default:
            parts = _dfts(graph, node, parts, *z.args[1:4], onesided=False)
        elif parts is not None:
            parts = (parts[0], _add(graph, node, None, parts[1], -1.0))
    else:
        return None
    z.meta["autotune_parts"] = parts
    return parts


def _dfts(graph: torch.fx.Graph, node: torch.fx.Node, parts: tuple, dims: list[int], norm: int, forward: bool,
          onesided: bool) -> tuple:
    """(R, I) after DFTs along `dims` (one-sided: the last keeps its first n // 2 + 1 outputs), ATen's norm mode
    (0 none, 1 by sqrt(n), 2 by n, n the product of the lengths). Along a dimension, each part is moved to the
    last axis once, multiplied by C and S there, and the two results moved back."""
    re, im = parts
    shape = list(_val(re).shape)
    sign = 1.0 if forward else -1.0  # inverse: F = C + i S
    for d in dims:
        d %= len(shape)
        n = shape[d]
        c, s = _dft_matrices(graph, node, n, n // 2 + 1 if onesided and d == dims[-1] % len(shape) else n)
        axes = [*range(d), *range(d + 1, len(shape)), d]  # d moved last
        re_l, im_l = (None if t is None else _permuted(graph, node, t, axes) for t in (re, im))
        re, im = (_permuted(graph, node, t, [axes.index(a) for a in range(len(axes))]) for t in (
            _add(graph, node, _matmul(graph, node, re_l, c), _matmul(graph, node, im_l, s), sign),
            _add(graph, node, _matmul(graph, node, im_l, c), _matmul(graph, node, re_l, s), -sign)))
        shape = list(_val(re).shape)
    count = math.prod(_val(parts[0]).shape[d] for d in dims)
    scale = {0: 1.0, 1: count ** -0.5, 2: 1.0 / count}[norm]
    if scale == 1.0:
        return re, im
    return tuple(None if t is None else _insert(graph, node, aten.mul.Tensor, (t, scale), _val(t)) for t in (re, im))


def _dft_matrices(graph: torch.fx.Graph, node: torch.fx.Node, n: int, keep: int) -> tuple:
    """C and S [n, keep]: cos and sin of 2 pi ((k j) mod n) / n, from aranges (constants once TVM folds them)."""
    kj = _insert(graph, node, aten.mul.Tensor, (_arange_along(graph, node, n, 0, 2),
                                                 _arange_along(graph, node, keep, 1, 2)),
                 torch.empty(n, keep, dtype=torch.int64))
    kj = _insert(graph, node, aten.remainder.Scalar, (kj, n), torch.empty(n, keep, dtype=torch.int64))
    angle = _insert(graph, node, aten._to_copy.default, (kj,), torch.empty(n, keep), {"dtype": torch.float32})
    angle = _insert(graph, node, aten.mul.Tensor, (angle, 2 * math.pi / n), torch.empty(n, keep))
    return tuple(_insert(graph, node, fn, (angle,), torch.empty(n, keep)) for fn in (aten.cos.default,
                                                                                     aten.sin.default))


def _permuted(graph: torch.fx.Graph, node: torch.fx.Node, x: torch.fx.Node, axes: list[int]) -> torch.fx.Node:
    """x with its axes in the order `axes` (x itself for the identity)."""
    if axes == sorted(axes):
        return x
    return _insert(graph, node, aten.permute.default, (x, axes), torch.empty([_val(x).shape[a] for a in axes]))


def _matmul(graph: torch.fx.Graph, node: torch.fx.Node, x: torch.fx.Node | None,
            matrix: torch.fx.Node) -> torch.fx.Node | None:
    """x @ matrix over x's last axis; None for x None (zero)."""
    if x is None:
        return None
    return _insert(graph, node, aten.matmul.default, (x, matrix),
                   torch.empty([*_val(x).shape[:-1], _val(matrix).shape[1]]))


def _add(graph: torch.fx.Graph, node: torch.fx.Node, a: torch.fx.Node | None, b: torch.fx.Node | None,
         sign: float) -> torch.fx.Node | None:
    """a + sign * b, either None for zero."""
    if b is None:
        return a
    b = b if sign == 1.0 else _insert(graph, node, aten.mul.Tensor, (b, sign), _val(b))
    return b if a is None else _insert(graph, node, aten.add.Tensor, (a, b), _val(a))


def _nonfinite_fill_added(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """full(size, v) / full_like(x, v) with v inf or NaN as the same fill of 0, plus v (masked_fill decomposes into
    a where of a scalar_tensor, which TVM takes)."""
    value, out = node.args[1], _val(node)
    if not isinstance(value, float) or math.isfinite(value) or not isinstance(out, torch.Tensor):
        return
    node.args = (node.args[0], 0.0, *node.args[2:])
    with graph.inserting_after(node):
        added = graph.call_function(aten.add.Tensor, (node, value))
    added.meta["val"] = out
    node.replace_all_uses_with(added, delete_user_cb=lambda user: user is not added)


def _narrow_product_rounded(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """mm / bmm / addmm / convolution of bf16 or fp16 tensors as the product without bias, cast to that type, plus
    the bias (addmm with beta = alpha = 1; a convolution's bias along its channel axis)."""
    out = _val(node)
    if not isinstance(out, torch.Tensor) or out.dtype not in (torch.bfloat16, torch.float16):
        return
    bias = None
    if node.target is aten.addmm.default:
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            return
        bias, a, b = node.args[:3]
        node.target, node.args, node.kwargs = aten.mm.default, (a, b), {}
    elif node.target is aten.convolution.default and node.args[2] is not None:
        bias = node.args[2]
        node.args = (*node.args[:2], None, *node.args[3:])
    with graph.inserting_after(node):
        rounded = graph.call_function(aten._to_copy.default, (node,), {"dtype": out.dtype})
    rounded.meta["val"] = out
    result, after = rounded, rounded.next
    if bias is not None:
        if node.target is aten.convolution.default:  # [C] along axis 1 of [N, C, *spatial]
            shape = [1, -1, *[1] * (out.ndim - 2)]
            bias = _insert(graph, after, aten.view.default, (bias, shape), _val(bias).view(shape))
        result = _insert(graph, after, aten.add.Tensor, (rounded, bias), out)
    node.replace_all_uses_with(result, delete_user_cb=lambda user: user is not rounded)


def _bmm(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """bmm by an expanded 2-d tensor as mm (`_expanded_matrix`), then as any product (`_narrow_product_rounded`)."""
    _narrow_product_rounded(graph, _bmm_of_expanded_matrix(graph, node) or node)


def _bmm_of_expanded_matrix(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """bmm(a [B, M, K], view(expand(w [K, N]))) as view(mm(reshape(a, [B M, K]), w), [B, M, N]): the new mm, or
    None when the second operand is not such an expansion."""
    a, b = node.args[:2]
    w = b.args[0] if b.op == "call_function" and b.target is aten.view.default else b
    if w.op != "call_function" or w.target is not aten.expand.default:
        return None
    w = w.args[0]
    av, wv, out = _val(a), _val(w), _val(node)
    if not all(isinstance(t, torch.Tensor) for t in (av, wv, out)) or wv.ndim != 2:
        return None
    rows = [av.shape[0] * av.shape[1], av.shape[2]]
    flat = _insert(graph, node, aten.view.default, (a, rows), av.reshape(rows))
    product = _insert(graph, node, aten.mm.default, (flat, w), out.reshape(rows[0], -1))
    result = _insert(graph, node, aten.view.default, (product, list(out.shape)), out)
    node.replace_all_uses_with(result)
    return product


def _in_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """An op on bf16 tensors computed on them cast to float32, each of its results (a tuple's, through its getitem
    users) cast back."""
    if not any(isinstance(_val(a), torch.Tensor) and _val(a).dtype == torch.bfloat16 for a in node.args):
        return
    node.args = tuple(_insert(graph, node, aten._to_copy.default, (a,), _val(a).float(), {"dtype": torch.float32})
                      if isinstance(_val(a), torch.Tensor) and _val(a).dtype == torch.bfloat16 else a
                      for a in node.args)
    results = [u for u in node.users if u.target is operator.getitem] if isinstance(_val(node), tuple) else [node]
    for result in results:
        val = _val(result)
        if not isinstance(val, torch.Tensor) or val.dtype != torch.bfloat16:
            continue
        result.meta["val"] = val.float()
        with graph.inserting_after(result):
            back = graph.call_function(aten._to_copy.default, (result,), {"dtype": torch.bfloat16})
        back.meta["val"] = val
        result.replace_all_uses_with(back, delete_user_cb=lambda user, back=back: user is not back)


def _all_ints(*values: Any) -> bool:
    return all(isinstance(v, int) for v in values)


# aten op -> its fix (graph, node), applied in place by `fix_graph`
FIXES = {
    aten.cat.default: _drop_empty_cat_inputs,
    aten.cumsum.default: _cumsum_result_dtype,
    aten.select.int: _select_from_start,
    aten.index.Tensor: _index_sliced_dimensions,
    aten.arange.start_step: _arange_counting_down,
    aten.index_put.default: _masked_fill_as_where,
    aten.div.Tensor_mode: _int_scalar_as_tensor,
    aten.pow.Tensor_Scalar: _small_power_as_products,
    aten.as_strided.default: _as_strided_as_gather,
    aten.unfold.default: _unfold_as_gather,
    aten.view_as_real.default: _fft_as_matmuls,
    **dict.fromkeys((aten.full.default, aten.full_like.default), _nonfinite_fill_added),
    **dict.fromkeys((aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor), _float_scalar_promotes),
    **dict.fromkeys((aten.mm.default, aten.addmm.default, aten.convolution.default), _narrow_product_rounded),
    aten.bmm.default: _bmm,
    aten.native_layer_norm.default: _in_float32,
}
