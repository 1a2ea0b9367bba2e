"""TVM's own PrimFunc of an operator, as TVM makes it from a Relax model, and how it maps onto the task's.

Relax's LegalizeOps turns relax.op.matmul, relax.op.linear (the weight transposed, then a matmul) and
relax.op.nn.conv2d into PrimFuncs with the loops of the task's PrimFunc (`autotune.templates.prim_func`) but other
block names ("matmul"; "pad_temp" and "conv2d_nchw" or "group_conv2d_nchw"), int64 indices, a copy block
"pad_temp" where a convolution does not pad, and, for a depthwise convolution (groups = channels), a reduction
loop of extent 1 over the group's one input channel. `to_task_func` inlines that copy and fuses that loop away,
so a trace of the task's PrimFunc runs on TVM's with its block names changed (each operator says how:
`OpDef.legalized_blocks`). TVM's PrimFunc of a dense is a
matmul reading W transposed, [K, N] (the transpose is a function of its own, folded away when W is a constant):
the workload of a matmul task of the same shape.

A MetaSchedule database finds a function by structural equality, attributes included, so `tvm_funcs` gives TVM's
PrimFunc as each of TVM's pipelines hands it to `relax.transform.MetaScheduleApplyDatabase` (`FORMS`).
"""

from __future__ import annotations

from typing import Any

from ..task import Task

# form -> the passes that make it: LegalizeOps alone; then AnnotateTIROpPattern (relax.pipeline.zero_pipeline and
# meta_schedule.relax_integration.compile_relax, for an operator with nothing fused into it); then, the weight a
# constant, AttachAttrLayoutFreeBuffers (relax's static_shape_tuning_pipeline with cpu_weight_prepack=True)
FORMS = {
    "legalized": "relax.transform.LegalizeOps",
    "legalized+op_pattern": "LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR",
    "legalized+layout_free": "the same, then AttachAttrLayoutFreeBuffers on a constant weight",
}


def tvm_funcs(task: Task) -> dict[str, Any]:
    """TVM's PrimFunc of the task's operator in each form (`FORMS`) that applies to it, normalised as
    MetaSchedule normalises a function it looks up ("main", `tirx.noalias`)."""
    import tvm
    from tvm import relax

    legalize = [relax.transform.LegalizeOps()]
    pipeline = [*legalize, relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
                relax.transform.FuseOps(), relax.transform.FuseTIR()]
    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")
    out = {"legalized": _anchor_func(tvm.transform.Sequential(legalize)(relax_model(task))),
           "legalized+op_pattern": _anchor_func(tvm.transform.Sequential(pipeline)(relax_model(task)))}
    if task.opdef.weights:  # the attribute AttachAttrLayoutFreeBuffers gives it (no weight-sized constant made)
        out["legalized+layout_free"] = out["legalized+op_pattern"].with_attr("layout_free_buffers",
                                                                            list(task.opdef.weights))
    return {form: normalize(func)["main"] for form, func in out.items()}


def to_task_func(sch, task: Task) -> dict[str, str]:
    """Give TVM's PrimFunc in `sch` the loops of the task's PrimFunc; returns the names, in `sch`, of the task's
    PrimFunc's blocks (the operator's `legalized_blocks`)."""
    return task.opdef.legalized_blocks(sch, task.shape)


def relax_model(task: Task):
    """A Relax module whose "main" computes the task's operator alone on its parameters, with the Relax operator a
    model uses."""
    from tvm import relax

    shapes = task.opdef.input_shapes(task.shape)
    params = [relax.Var(f"x{i}", relax.TensorType(s, task.dtype)) for i, s in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax_call(task, params))
        bb.emit_func_output(out)
    return bb.get()


def relax_call(task: Task, operands: list):
    """The Relax operator a model computes the task's operator with, applied to `operands` (Relax expressions)."""
    return task.opdef.relax_call(task.shape, operands)


def _anchor_func(mod):
    """The module's PrimFunc that computes the operator (a reduction), not a transpose of its weight."""
    import tvm
    from tvm import tirx
    from tvm.s_tir.analysis import find_anchor_sblock

    [func] = [f for _, f in mod.functions_items()
              if isinstance(f, tirx.PrimFunc) and find_anchor_sblock(tvm.IRModule({"main": f})) is not None]
    return func
