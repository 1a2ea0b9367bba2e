"""A dynamic kernel's bias add in its uKernels' write-back, as a static build fuses a kernel's epilogue.

A linear layer or convolution adds a constant bias to the product (`add(product, bias)`). In a static build,
FuseOps puts that add into the kernel's function and `model.epilogue.schedule_fused` computes it in the
write-back loop. A dynamic kernel's dispatcher is a function of its own, so each uKernel is fused with the add
the same way, on its own static shape: a small Relax module (the uKernel's call, then the add), FuseOps and
FuseTIR (the add narrowed to int32 indices first, as the kernels are), then `schedule_fused`. The fused uKernel
takes the bias as one more operand, not cut by rows (`dispatch.DynamicKernel` with `sliced` (True, False, False)).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .dispatch import UKernel


def is_bias(bias: Any, out_shape: list[Any]) -> bool:
    """Whether a constant broadcasts along the output's rows only: [N] or [1, N] for a dense output [rows, N],
    [1, K, 1, 1] or [K, 1, 1] for a conv2d output [N, K, P, Q]."""
    dims = [int(d) for d in bias.ty.shape]
    out = list(out_shape)
    if len(out) == 2:
        return dims in ([int(out[1])], [1, int(out[1])])
    if len(out) == 4:
        return dims in ([1, int(out[1]), 1, 1], [int(out[1]), 1, 1])
    return False


def with_bias(ukernel: UKernel, bias: Any, lanes: int) -> UKernel:
    """The uKernel computing its output plus `bias` (a numpy array of the bias's shape) in its write-back: its
    PrimFunc takes (the sliced input, the weight, the bias, the output)."""
    from tvm import relax, tirx
    import tvm

    from ..model.default_schedule import schedule_block, vectorize_with_tail
    from ..model.epilogue import mark_kernel, narrow_epilogues, schedule_fused

    func = ukernel.func
    params = list(func.params)
    out = params[-1]
    bb = relax.BlockBuilder()
    args = [relax.Var(f"in{i}", relax.TensorType([int(d) for d in p.ty.shape], str(p.ty.dtype)))
            for i, p in enumerate(params[:-1])]
    b = relax.Var("bias", relax.TensorType(list(bias.shape), str(bias.dtype)))
    with bb.function("main", [*args, b]):
        with bb.dataflow():
            kernel = bb.add_func(mark_kernel(func).without_attr("global_symbol"), "ukernel")
            y = bb.emit(relax.call_tir(kernel, args, relax.TensorType([int(d) for d in out.ty.shape],
                                                                     str(out.ty.dtype))))
            z = bb.emit_output(bb.emit(relax.op.add(y, b)))
        bb.emit_func_output(z)
    mod = tvm.transform.Sequential([
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
        narrow_epilogues(), relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])(bb.get())
    fused = [f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    if len(fused) != 1:
        raise RuntimeError(f"the bias add did not fuse into the uKernel ({len(fused)} functions)")
    done = schedule_fused(fused[0], lambda sch, blk: schedule_block(sch, blk, lanes),
                          lambda sch, loop: vectorize_with_tail(sch, loop, lanes))
    if done is None or "apart" in done[1]:
        raise RuntimeError("the bias add did not fuse into the uKernel's write-back")
    return dataclasses.replace(ukernel, func=done[0])
