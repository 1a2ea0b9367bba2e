"""Import a model quantized by PyTorch (PT2E: `prepare_pt2e` / `convert_pt2e`, e.g. torchao's
X86InductorQuantizer) into Relax, its quantized convolutions and linear layers as int8 products.

PT2E leaves float32 convolutions and matrix products between `quantized_decomposed` ops: an activation is
quantized per tensor (uint8 or int8, a scale and a zero point) and dequantized before each product, and a weight is
stored in int8 and dequantized per output channel (zero points 0). Here (converters given to TVM's importer):
  - quantize and dequantize on their own are the same arithmetic as PyTorch's reference functions
    (`torch.ao.quantization.fx._decomposed`): round(x / s) + z clipped to the type's range, (q - z) * s;
  - a convolution (2-d) or an addmm / mm whose operands are a dequantized activation q (scale sx, zero point zx)
    and a dequantized constant weight w (scales sw[k], zero points 0) is an int8 product, summed in int32:
        y[k] = sx sw[k] sum (q - zx) w[k] + bias[k]
    The activation becomes int8 as q8 = q - 128 for uint8 (q itself for int8), padded with zx - 128 (the
    activation's zero), so that sum (q - zx) w[k] = sum q8 w[k] - (zx - 128) sum w[k], the last term a constant
    per output channel, computed here. `extract` takes the int8 product as an int8 task, and what follows it (the
    compensation, the scales, the bias, then the next quantize) is its epilogue.
A quantized product of another form (a weight computed at run time or with zero points, a transposed or 1-d/3-d
convolution) is refused with its reason: computing it in float32 would not be the model that was asked for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import AutotuneError

QUANTIZE = "quantize_per_tensor.default"
DEQUANTIZE = "dequantize_per_tensor.default"
DEQUANTIZE_CHANNELS = "dequantize_per_channel.default"
WEIGHT_DEQUANTIZERS = (DEQUANTIZE_CHANNELS, DEQUANTIZE)  # how a quantized weight is dequantized
VIEWS = ("view.default", "reshape.default", "_unsafe_view.default")  # a tensor's values in another shape
TYPES = {"torch.uint8": ("uint8", 128), "torch.int8": ("int8", 0)}  # activation type -> (TVM dtype, shift to int8)


class Unsupported(AutotuneError):
    """A quantized pattern this importer does not compute in int8 (the reason is the message)."""


def is_quantized(program: Any) -> bool:
    """Whether an exported program (a graph module) holds PT2E's quantize/dequantize ops."""
    return any(n.op == "call_function" and str(n.target).startswith("quantized_decomposed.")
               for n in program.graph.nodes)


def register_ops() -> None:
    """Make PyTorch's `quantized_decomposed` ops known (needed to load a saved quantized program)."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers the ops


def _name(node: Any) -> str:
    return getattr(getattr(node, "target", None), "__name__", "") if getattr(node, "op", "") == "call_function" \
        else ""


def _kind(node: Any) -> tuple[str, int]:
    """(TVM dtype, shift to int8) of a quantize/dequantize node's integer type."""
    position = 6 if _name(node) == DEQUANTIZE_CHANNELS else 5
    dtype = str(node.args[position] if len(node.args) > position else node.kwargs.get("dtype"))
    if dtype not in TYPES:
        raise Unsupported(f"quantized type {dtype} (only uint8 and int8)")
    return TYPES[dtype]


def _scalar(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)):
        raise Unsupported(f"a {what} computed at run time")
    return float(value)


def _quantize(node: Any, importer: Any) -> Any:
    """round(x * (1 / s)) + z, clipped to [qmin, qmax], in the integer type (PyTorch's quantize_per_tensor)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    scale, zero = (_scalar(v, "quantization scale") for v in node.args[1:3])
    qmin, qmax = node.args[3:5]
    dtype, _ = _kind(node)
    emit = importer.block_builder.emit
    scaled = emit(relax.op.round(relax.op.multiply(x, relax.const(1.0 / scale, "float32"))))
    shifted = emit(relax.op.add(scaled, relax.const(zero, "float32")))
    return emit(relax.op.astype(relax.op.clip(shifted, qmin, qmax), dtype))


def _dequantize(node: Any, importer: Any) -> Any:
    """(q - z) * s in float32 (PyTorch's dequantize_per_tensor)."""
    from tvm import relax

    q = importer.env[node.args[0]]
    scale, zero = (_scalar(v, "quantization scale") for v in node.args[1:3])
    emit = importer.block_builder.emit
    wide = emit(relax.op.subtract(relax.op.astype(q, "float32"), relax.const(zero, "float32")))
    return emit(relax.op.multiply(wide, relax.const(scale, "float32")))


def _dequantize_channels(node: Any, importer: Any) -> Any:
    """(q - z[c]) * s[c] in float32 along `axis` (PyTorch's dequantize_per_channel)."""
    from tvm import relax

    q, scales, zeros = (importer.env[a] for a in node.args[:3])
    axis = node.args[3]
    ndim = len(q.ty.shape)
    shape = [1] * ndim
    shape[axis % ndim] = -1
    emit = importer.block_builder.emit

    def along(vector: Any) -> Any:
        return emit(relax.op.reshape(emit(relax.op.astype(vector, "float32")), shape))

    wide = emit(relax.op.subtract(relax.op.astype(q, "float32"), along(zeros)))
    return emit(relax.op.multiply(wide, along(scales)))


def constant_values(program: Any) -> dict[str, np.ndarray]:
    """The program's constant inputs (parameters, buffers, lifted constants) by placeholder name, as arrays."""
    from .capture import to_numpy

    tensors = {**dict(program.named_parameters()), **dict(program.named_buffers()), **program.constants}
    return {spec.arg.name: to_numpy(tensors[spec.target].detach()) for spec in program.graph_signature.input_specs
            if spec.target in tensors}


def _constant(node: Any, constants: dict[str, np.ndarray], what: str) -> np.ndarray:
    if getattr(node, "op", "") != "placeholder" or node.name not in constants:
        raise Unsupported(f"a {what} computed at run time")
    return constants[node.name]


def _weight(node: Any, constants: dict[str, np.ndarray], out_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weight, float32 scale per output channel) of a dequantized constant weight; its output channels
    along `out_axis`."""
    name = _name(node)
    if name not in WEIGHT_DEQUANTIZERS or _kind(node)[0] != "int8":
        raise Unsupported("a weight that is not dequantized from int8")
    weight = _constant(node.args[0], constants, "quantized weight")
    channels = weight.shape[out_axis]
    if name == DEQUANTIZE:
        scales = np.full(channels, _scalar(node.args[1], "weight scale"))
        zeros = np.full(channels, _scalar(node.args[2], "weight zero point"))
    else:
        if node.args[3] % weight.ndim != out_axis:
            raise Unsupported(f"weight scales along axis {node.args[3]}, not the output channels")
        scales = _constant(node.args[1], constants, "weight scale")
        zeros = _constant(node.args[2], constants, "weight zero point")
    if np.any(zeros != 0):
        raise Unsupported("weight zero points other than 0")
    return weight.astype(np.int8), scales.astype(np.float32)


def _int8_activation(node: Any, importer: Any, pads: list[int] | None = None) -> tuple[Any, float, int]:
    """(the activation as int8, padded by `pads` with its zero, its scale, its zero point in the int8 range) of a
    dequantized activation."""
    from tvm import relax

    if _name(node) != DEQUANTIZE:
        raise Unsupported("an activation that is not dequantized per tensor")
    _, shift = _kind(node)
    scale, zero = (_scalar(v, "quantization scale") for v in node.args[1:3])
    q = importer.env[node.args[0]]
    emit = importer.block_builder.emit
    q8 = q if not shift else emit(relax.op.astype(
        relax.op.subtract(relax.op.astype(q, "int32"), relax.const(shift, "int32")), "int8"))
    zero8 = int(zero) - shift
    if pads and any(pads):
        q8 = emit(relax.op.nn.pad(q8, pads, pad_value=float(zero8)))
    return q8, scale, zero8


def _requantized(acc: Any, importer: Any, correction: np.ndarray, scales: np.ndarray, bias: Any,
                 shape: list[int]) -> Any:
    """float32 (acc - correction) * scales + bias, the per-channel constants viewed as `shape`."""
    from tvm import relax

    emit = importer.block_builder.emit
    if np.any(correction):
        acc = emit(relax.op.subtract(acc, relax.const(correction.astype(np.int32).reshape(shape))))
    out = emit(relax.op.multiply(relax.op.astype(acc, "float32"), relax.const(scales.reshape(shape))))
    if bias is not None:
        out = emit(relax.op.add(out, emit(relax.op.reshape(bias, shape))))
    return out


def _quantized_operands(data: Any, weight: Any, what: str) -> int:
    """How many of a product's operands are dequantized (an activation per tensor, a weight); Unsupported where
    one only is (`what`: the product, in the reason)."""
    count = (_name(data) == DEQUANTIZE) + (_name(weight) in WEIGHT_DEQUANTIZERS)
    if count == 1:
        raise Unsupported(f"a {what} of which one operand only is quantized")
    return count


def _default(node: Any, importer: Any, originals: dict[str, Callable[[Any], Any]]) -> Any:
    """The importer's own conversion of `node` (its converter before `convert_map` replaced it); `originals`: the
    importer's converters, filled on first use."""
    if not originals:
        originals.update(importer.create_convert_map())
    return originals[node.target.__name__](node)


def _convolution(node: Any, importer: Any, constants: dict[str, np.ndarray],
                 originals: dict[str, Callable[[Any], Any]]) -> Any:
    from tvm import relax

    data, weight_node, bias = node.args[:3]
    if not _quantized_operands(data, weight_node, "convolution"):
        return _default(node, importer, originals)
    stride, padding, dilation, transposed, _, groups = node.args[3:9]
    weight, w_scales = _weight(weight_node, constants, 0)
    if transposed or weight.ndim != 4:
        raise Unsupported(f"a quantized {'transposed ' if transposed else ''}{weight.ndim - 2}-d convolution "
                          "(only 2-d)")
    top, left = padding
    q8, scale, zero8 = _int8_activation(data, importer, [0, 0, 0, 0, top, top, left, left])
    acc = importer.block_builder.emit(relax.op.nn.conv2d(q8, relax.const(weight), strides=stride, padding=0,
                                                         dilation=dilation, groups=groups, out_dtype="int32"))
    correction = zero8 * weight.astype(np.int64).sum(axis=(1, 2, 3))
    return _requantized(acc, importer, correction, scale * w_scales, importer.env.get(bias), [1, -1, 1, 1])


def _matrix_product(node: Any, importer: Any, constants: dict[str, np.ndarray],
                    originals: dict[str, Callable[[Any], Any]]) -> Any:
    """addmm(bias, x, w^T) / mm(x, w^T) of a dequantized activation (or a view of one: a linear layer's input of
    more than 2 dimensions, flattened) and a transposed dequantized weight [N, K]."""
    from tvm import relax

    with_bias = node.target.__name__ == "addmm.default"
    bias, data, other = node.args[:3] if with_bias else (None, *node.args[:2])
    source = data.args[0] if _name(data) in VIEWS else data
    weight_node = other.args[0] if _name(other) == "permute.default" and list(other.args[1]) == [1, 0] else other
    if not _quantized_operands(source, weight_node, "matrix product"):
        return _default(node, importer, originals)
    if weight_node is other:
        raise Unsupported("a quantized matrix product of another form than x @ w.T (a linear layer)")
    if with_bias and (node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("beta", 1) != 1):
        raise Unsupported("a quantized addmm with alpha or beta")
    weight, w_scales = _weight(weight_node, constants, 0)
    q8, scale, zero8 = _int8_activation(source, importer)
    if source is not data:
        q8 = importer.block_builder.emit(relax.op.reshape(q8, list(data.args[1])))
    acc = importer.block_builder.emit(relax.op.matmul(q8, relax.op.permute_dims(relax.const(weight)),
                                                      out_dtype="int32"))
    correction = zero8 * weight.astype(np.int64).sum(axis=1)
    return _requantized(acc, importer, correction, scale * w_scales, importer.env.get(bias), [1, -1])


def convert_map(program: Any) -> dict[str, Callable[[Any, Any], Any]]:
    """Converters of a quantized program's nodes for TVM's `from_exported_program(custom_convert_map=...)` (module
    docstring); a product's converter hands a product of operands that are not quantized to the importer's own."""
    constants, originals = constant_values(program), {}
    products = {name: functools.partial(convert, constants=constants, originals=originals) for name, convert in (
        ("convolution.default", _convolution), ("addmm.default", _matrix_product), ("mm.default", _matrix_product))}
    return {**_ON_THEIR_OWN, **products}


# the quantized_decomposed ops, converted on their own (not as a product's operand)
_ON_THEIR_OWN = {QUANTIZE: _quantize, DEQUANTIZE: _dequantize, DEQUANTIZE_CHANNELS: _dequantize_channels}
OPS = frozenset(_ON_THEIR_OWN)
