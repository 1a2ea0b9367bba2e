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
  - `x[mask] = v` with a bool mask over x's leading dimensions (Longformer): TVM's index_put takes integer indices
    only; it is where(mask, v, x);
  - as_strided other than a contiguous view (Longformer's overlapping windows) fails TVM's importer, and unfold
    (frames of a signal, `Tensor.unfold`) has none: both gather from the flattened tensor at indices built from
    aranges (offset + sum of index_d * stride_d).
"""

from __future__ import annotations

import math
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


def fix_graph(gm: torch.fx.GraphModule) -> None:
    """Apply the graph-level fixes in place (on a decomposed, core-ATen graph): each node's fix in FIXES (below)."""
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
    aranges = []
    for q in range(p):
        view = [int(shape[q])] + [1] * (p - 1 - q + ndim)
        arange = _insert(graph, node, aten.arange.default, (int(shape[q]),), torch.arange(int(shape[q])),
                         {"dtype": torch.int64})
        aranges.append(_insert(graph, node, aten.view.default, (arange, view), _val(arange).view(view)))
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
    if not isinstance(x, torch.Tensor) or not x.is_contiguous() or not _all_ints(*size, *stride, offset):
        return  # as_strided reads x's storage: x's flat index is its storage index only when x is contiguous
    offset -= x.storage_offset()
    view = offset == 0 and all(n == 1 or s == math.prod(size[d + 1:]) for d, (n, s) in enumerate(zip(size, stride)))
    if not view:  # TVM's importer takes a contiguous view as a reshape
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
        shape = [1] * len(size)
        shape[d] = n
        arange = _insert(graph, node, aten.arange.default, (n,), torch.arange(n), {"dtype": torch.int64})
        term = _insert(graph, node, aten.view.default, (arange, shape), _val(arange).view(shape))
        term = _insert(graph, node, aten.mul.Tensor, (term, s), _val(term) * s)
        index = term if index is None else _insert(graph, node, aten.add.Tensor, (index, term), _val(index) + _val(term))
    index = _insert(graph, node, aten.add.Tensor, (index, offset), _val(index) + offset)
    node.replace_all_uses_with(_insert(graph, node, aten.index.Tensor, (flat, [index]), _val(node)))


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
    aten.as_strided.default: _as_strided_as_gather,
    aten.unfold.default: _unfold_as_gather,
    **dict.fromkeys((aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor), _float_scalar_promotes),
}
