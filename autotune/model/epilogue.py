"""Epilogue fusion: the elementwise ops after a tuned kernel (bias add, activation, residual add) run in its
write-back loop instead of in passes of their own over the output.

A model's kernels enter Relax as call_tir of their scheduled PrimFuncs with the pattern kOutEWiseFusable, so
FuseOps groups each with the elementwise/broadcast ops that follow it (as Relay did for conv2d + bias + relu) and
FuseTIR writes one PrimFunc per group: the kernel's loop nests as scheduled, then the epilogue's unscheduled
blocks (`narrow_epilogues` first gives the group int32 copies of the epilogue's functions, as the kernels are).
`schedule_fused` inlines that chain into the kernel's write-back block (every CPU template copies its
accumulator out in one; `reverse_compute_inline`), so the output is written once, the epilogue computed on the
tile just finished, in the write-back's vectors; a chain that reads the output twice (GELU) is first inlined into
its last block. What cannot be inlined (a reshape, a write-back under a predicate) keeps a generic schedule of
its own, inside the same function.
"""

from __future__ import annotations

from typing import Any

KERNEL = "autotune.kernel"  # block annotation: 1 on a tuned kernel's blocks, WRITE_BACK on the one writing its output
WRITE_BACK = 2
INJECTIVE = 2  # relax OpPatternKind.kInjective: fuses with the elementwise and injective ops around it
OUT_EWISE_FUSABLE = 4  # relax OpPatternKind.kOutEWiseFusable: elementwise consumers fuse into it
OPAQUE = 8  # relax OpPatternKind.kOpaque: FuseOps fuses nothing into it
MAX_INT32 = 2**31 - 1


def _blocks(sch: Any) -> list[Any]:
    try:
        root = sch.get_sblock("root")
    except Exception:  # noqa: BLE001 - a function without a root block
        return []
    return list(sch.get_child_blocks(root))


def mark_kernel(func: Any, fusable: bool = True) -> Any:
    """The kernel's PrimFunc with its blocks annotated (the write-back: the block that writes its output) and
    the pattern that lets FuseOps fuse elementwise consumers into it (`fusable`; else opaque: left alone)."""
    from tvm import s_tir

    out = func.params[-1]
    sch = s_tir.Schedule(func)
    for blk in _blocks(sch):
        writes_out = any(w.source.same_as(out) for w in sch.get(blk).writes)
        sch.annotate(blk, KERNEL, WRITE_BACK if writes_out else 1)
    pattern = OUT_EWISE_FUSABLE if fusable else OPAQUE
    return (sch.mod["main"].with_attr("op_pattern", pattern).with_attr("tirx.is_scheduled", True)
            .with_attr(KERNEL, 1))


def is_kernel(func: Any) -> bool:
    """Whether a function is a kernel `mark_kernel` made (before FuseTIR; `schedule_fused` tells after it)."""
    return bool(int((getattr(func, "attrs", None) or {}).get(KERNEL, 0) or 0))


def _kernel_mark(sch: Any, blk: Any) -> int:
    value = sch.get(blk).annotations.get(KERNEL)
    return int(value) if value is not None else 0


def schedule_fused(func: Any, schedule_block: Any, vectorize: Any = None) -> tuple[Any, str] | None:
    """(scheduled PrimFunc, how) for a fused kernel + epilogue, None for a function without a kernel's blocks:
    the epilogue chain reverse-inlined into the write-back block (whose innermost loop, if the template left it
    scalar, is then given to `vectorize(sch, loop)`: an epilogue such as GELU is worth vectors where a copy was
    not); any block left over scheduled by `schedule_block(sch, blk)`."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(func)
    except Exception:  # noqa: BLE001 - not schedulable: not one of ours
        return None
    if not any(_kernel_mark(sch, b) for b in _blocks(sch)):
        return None
    write_backs = [b for b in _blocks(sch) if _kernel_mark(sch, b) == WRITE_BACK]
    epilogue = sum(not _kernel_mark(sch, b) for b in _blocks(sch))
    if len(write_backs) == 1:
        _inline_intermediates(sch)
        while True:
            consumers = sch.get_consumers(write_backs[0])
            if len(consumers) != 1:
                break
            try:
                sch.reverse_compute_inline(consumers[0])
            except Exception:  # noqa: BLE001 - not elementwise on the kernel's output: it keeps its own loops
                break
    rest = [b for b in _blocks(sch) if not _kernel_mark(sch, b)]
    if len(write_backs) == 1 and len(rest) < epilogue:  # an epilogue runs in the write-back (a copy stays as tuned)
        _vectorize_write_back(sch, write_backs[0], vectorize)
    for blk in rest:
        try:
            schedule_block(sch, blk)
        except Exception:  # noqa: BLE001, S112 - a primitive refused: this block stays serial
            continue
    fused = epilogue - len(rest)
    how = f"epilogue fused ({fused} ops)" if not rest else f"epilogue fused ({fused} ops, {len(rest)} apart)"
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), how


def _vectorize_write_back(sch: Any, write_back: Any, vectorize: Any) -> None:
    """Give the write-back's innermost loop to `vectorize` when it is a plain serial loop."""
    from tvm import tirx

    if vectorize is None:
        return
    loops = sch.get_loops(write_back)
    if loops and sch.get(loops[-1]).kind == tirx.ForKind.SERIAL:
        vectorize(sch, loops[-1])


def _inline_intermediates(sch: Any) -> None:
    """Inline each epilogue block that feeds another one into its consumers (GELU's x * 0.5 * (1 + erf(x / sqrt 2))
    reads x twice through a chain of blocks: inlined, it is one block the write-back can take)."""
    blocks = [b for b in _blocks(sch) if not _kernel_mark(sch, b)]
    for blk in blocks[:-1]:
        if sch.get_consumers(blk):
            try:
                sch.compute_inline(blk)
            except Exception:  # noqa: BLE001, S110 - not elementwise: it keeps its own loops
                pass


def narrowed_copy(func: Any) -> Any | None:
    """`func` with int32 shapes and indices (as te.create_prim_func writes the kernels'), or None where that is not
    safe: a scalar (0-d) or 64-bit integer buffer (the pass would narrow its values too), a symbolic shape, 2**31
    elements or more, or the pass refuses."""
    import math

    import tvm
    from tvm import tirx

    try:
        shapes = [[int(d) for d in p.shape] for p in func.params]
    except TypeError:  # a symbolic dimension
        return None
    wide = any(str(p.dtype) in ("int64", "uint64") for p in func.params)
    if wide or any(not s or math.prod(s) > MAX_INT32 for s in shapes):
        return None
    try:
        return tirx.transform.ForceNarrowIndexToInt32()(tvm.IRModule({"main": func}))["main"]
    except Exception:  # noqa: BLE001 - the pass refuses it
        return None


def narrow_epilogues() -> Any:
    """Module pass, between FuseOps and FuseTIR: in each group FuseOps made around a kernel, the other functions
    are replaced by int32 copies (LegalizeOps writes int64 shapes and indices, the kernels are int32, and FuseTIR
    maps a value to one buffer type only). A group with a function that cannot be narrowed is not fused: it runs
    as calls of its functions, each scheduled on its own. Groups without a kernel are left as they are."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    call_tir = tvm.ir.Op.get("relax.call_tir")

    def callees(func: Any) -> list[Any]:
        found: list[Any] = []
        relax.analysis.post_order_visit(func, lambda e: found.append(e.args[0]) if (
            isinstance(e, relax.Call) and e.op.same_as(call_tir)) else None)
        return found

    @mutator
    class _Swap(PyExprMutator):
        """Points the call_tir of each function in `plan` to its replacement."""

        def __init__(self, module: Any):
            super().__init__(module)
            self.plan: dict[Any, Any] = {}

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if call.op.same_as(call_tir) and call.args[0] in self.plan:
                return relax.Call(call.op, [self.plan[call.args[0]], *call.args[1:]], call.attrs, call.ty_args)
            return call

    @tvm.transform.module_pass(opt_level=0, name="autotune.NarrowEpilogues")
    def run(mod: Any, _ctx: Any) -> Any:
        swap = _Swap(mod)
        copies: dict[Any, Any] = {}  # original gvar -> its int32 copy's gvar (None: cannot be narrowed)
        for gv, group in list(mod.functions_items()):
            if not isinstance(group, relax.Function) or not int((group.attrs or {}).get("Primitive", 0) or 0):
                continue
            called = callees(group)
            if not any(is_kernel(mod[c]) for c in called):
                continue
            for c in called:
                if c not in copies and not is_kernel(mod[c]):
                    narrow = narrowed_copy(mod[c])
                    copies[c] = None if narrow is None else swap.builder_.add_func(narrow, f"{c.name_hint}_i32")
            plan = {c: copies[c] for c in called if not is_kernel(mod[c])}
            if any(v is None for v in plan.values()):
                swap.builder_.update_func(gv, group.without_attr("Primitive"))  # FuseTIR leaves it: calls one by one
                continue
            swap.plan = plan
            swap.builder_.update_func(gv, swap.visit_expr(group))
        return swap.builder_.get()

    return run
