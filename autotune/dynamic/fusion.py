"""A dynamic kernel's elementwise consumers (bias, activation, residual add) in its uKernels' write-back, as a
static build fuses a kernel's epilogue (`model.epilogue`).

The dispatcher (`compiled.dispatch_func`) enters FuseOps with the pattern of a tuned kernel (kOutEWiseFusable),
so FuseOps groups it with the elementwise ops after it as it groups a static kernel. FuseTIR cannot read a
dispatcher, so before it each such group becomes a dispatcher of its own (`fuse_dispatch_groups`): per uKernel,
the group at the uKernel's height (the rows' symbolic size bound to it) calling the uKernel instead of the
dispatcher, fused by FuseTIR and scheduled by `schedule_fused`, as a static build's group is; then
`dispatch_func` over those. An operand of the epilogue whose leading size is the rows' is cut by rows with the
input; any other (a bias) is passed whole to every uKernel. Only a dispatcher whose rows are one symbolic size
takes part (`model.rewrite_sites`): rows of a product of sizes (a batch times a length, flattened) have no
height to bind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .compiled import dispatch_func
from .dispatch import DynamicKernel


class NotFusable(Exception):
    """A group this module cannot make into one dispatcher (the model is then built without fusing any)."""


def fuse_dispatch_groups(kernels: Mapping[str, DynamicKernel], schedule_rest: Callable,
                         vectorize: Callable | None, fused: dict[str, list[list[str]]]) -> Any:
    """A module pass (between FuseOps and FuseTIR): each fused group that calls a dispatcher of `kernels` (by its
    function's name) made into one dispatcher of uKernels fused with the group's epilogue (`NotFusable` where one
    cannot be). `fused` gets, per dispatcher, each group's epilogue (its functions' names)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @tvm.transform.module_pass(opt_level=0, name="FuseDispatchGroups")
    def fuse(mod: Any, _ctx: Any) -> Any:
        groups: dict[Any, tuple[FusedGroup, str]] = {}  # group GlobalVar -> (it fused, its name)
        for gv, func in list(mod.functions_items()):
            if isinstance(func, relax.Function) and int((func.attrs or {}).get("Primitive", 0) or 0):
                call = _dispatch_call(func, kernels)
                if call is not None:
                    dispatcher = call.args[0].name_hint
                    group = FusedGroup(mod, func, call, kernels[dispatcher], schedule_rest, vectorize)
                    groups[gv] = (group, "_".join([dispatcher, *group.epilogue]))
                    fused.setdefault(dispatcher, []).append(group.epilogue)
        if not groups:
            return mod
        builder = relax.BlockBuilder(mod)
        made = {gv: builder.add_func(group.func.without_attr("global_symbol"), name)
                for gv, (group, name) in groups.items()}

        @mutator
        class _Calls(PyExprMutator):
            def visit_call_(self, call: Any) -> Any:
                call = super().visit_call_(call)
                if call.op in groups:
                    return relax.call_tir(made[call.op], groups[call.op][0].arguments(list(call.args)), call.ty)
                return call

        calls = _Calls(builder.get())
        for gv, func in builder.get().functions_items():
            if isinstance(func, relax.Function) and gv not in groups:
                calls.builder_.update_func(gv, calls.visit_expr(func))
        out = calls.builder_.get()
        return tvm.IRModule({g: f for g, f in out.functions_items() if g not in groups}, attrs=out.attrs)

    return fuse


def _bindings(func: Any) -> list[Any]:
    return [b for block in func.body.blocks for b in block.bindings]


def _dispatch_call(func: Any, kernels: Mapping[str, DynamicKernel]) -> Any | None:
    """The group's call_tir of a dispatcher of `kernels` (FuseOps puts one kernel in a group at most), or None."""
    return next((b.value for b in _bindings(func) if _callee(b.value) in kernels), None)


def _callee(value: Any) -> str | None:
    from tvm import relax

    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
        return value.args[0].name_hint
    return None


class FusedGroup:
    """One group of FuseOps around a dispatcher, as one dispatcher of fused uKernels (`func`). `arguments` maps the
    group's call arguments onto the new function's."""

    def __init__(self, mod: Any, group: Any, call: Any, kernel: DynamicKernel, schedule_rest: Callable,
                 vectorize: Callable | None):
        from tvm import relax, tirx

        rows = call.ty.shape[0]
        if not isinstance(rows, tirx.Var):
            raise NotFusable(f"a dynamic kernel's rows are {rows}, not one symbolic size")
        inputs = list(call.args[1].fields)  # sliced inputs, the fixed operands, the plan table (on a CPU)
        n_sliced = sum(kernel.sliced)
        params = list(group.params)
        self._position = {p: i for i, p in enumerate(params)}
        names = [_callee(b.value) for b in _bindings(group)]
        self.epilogue = [n for n in names if n not in (None, call.args[0].name_hint)]
        fused, layouts = [], []
        for k, ukernel in enumerate(kernel.ukernels):
            mine = [*inputs[:n_sliced], *(inputs[n_sliced + p] for p in kernel.params.uses[k])]
            func, used = _at_height(mod, group, call, ukernel, mine, rows)
            fused.append((ukernel.height, _scheduled(func, schedule_rest, vectorize)))
            layouts.append(used)
        self._sliced = [_cut_by_rows(params[i], rows) for i in layouts[0]]
        for used in layouts:
            if [_cut_by_rows(params[i], rows) for i in used] != self._sliced:
                raise NotFusable("the uKernels of a fused group take their operands in different orders")
        self._layouts = layouts
        table = inputs[-1] if kernel.params.table is not None else None
        self._table = self._position[table] if isinstance(table, relax.Var) else table
        # an operand every uKernel reads from the same group parameter (a weight they take as it is, a bias) is
        # one parameter of the fused dispatcher
        as_given = [[j for j, i in enumerate(used) if i == layouts[0][j]] for used in layouts]
        self.func, self.params = dispatch_func(self._sliced, fused, kernel.table, name="main", gpu=kernel.gpu,
                                               as_given=as_given)

    def arguments(self, args: list[Any]) -> list[Any]:
        """The dispatcher's arguments from the group's call's: the sliced ones, the fixed ones (each uKernel's
        own), the plan table (on a CPU)."""
        first = self._layouts[0]
        sliced = [args[i] for i, s in zip(first, self._sliced) if s]
        fixed = [args[self._layouts[k][j]] for k, own in enumerate(self.params.fixed) for j, _ in own]
        table = [] if self._table is None else [args[self._table] if isinstance(self._table, int) else self._table]
        return [*sliced, *fixed, *table]


def _cut_by_rows(param: Any, rows: Any) -> bool:
    """Whether a group parameter is cut by rows: its leading size the rows', the rest static (any other
    symbolic shape cannot be cut)."""
    import tvm_ffi
    from tvm import tirx

    shape = list(getattr(param.ty, "shape", None) or [])
    if all(isinstance(d, tirx.IntImm) for d in shape):
        return False
    if tvm_ffi.structural_equal(shape[0], rows) and all(isinstance(d, tirx.IntImm) for d in shape[1:]):
        return True
    raise NotFusable(f"an operand of a dynamic kernel's epilogue has the shape {shape}: not cut by rows")


def _at_height(mod: Any, group: Any, call: Any, ukernel: Any, inputs: list[Any], rows: Any) -> tuple[Any, list[int]]:
    """(the group at the uKernel's height, fused into one PrimFunc by FuseTIR; the indices of the group's
    parameters it takes, in order)."""
    import tvm
    from tvm import relax

    from ..model.epilogue import mark_kernel, narrow_epilogues

    bound = group.bind_symbolic_vars({rows: ukernel.height})
    dispatcher = call.args[0].name_hint
    params = list(group.params)
    builder = relax.BlockBuilder(tvm.IRModule())
    ukernel_gv = builder.add_func(mark_kernel(ukernel.func).without_attr("global_symbol"), "ukernel")
    args = [bound.params[params.index(a)] if isinstance(a, relax.Var) else a for a in inputs]
    out = ukernel.func.params[-1]
    out_ty = relax.TensorType([int(d) for d in out.ty.shape], str(out.ty.dtype))

    @relax.expr_functor.mutator
    class _Swap(relax.expr_functor.PyExprMutator):
        """The dispatcher's call on the uKernel; every other function on a copy of the call's static shapes."""

        def visit_call_(self, c: Any) -> Any:
            c = super().visit_call_(c)
            name = _callee(c)
            if name == dispatcher:
                return relax.call_tir(ukernel_gv, args, out_ty)
            if name is None:
                return c
            copy = _static_copy(mod[name], [*c.args[1].fields, c], name)
            return relax.call_tir(builder.add_func(copy, name), list(c.args[1].fields), c.ty)

    body = _Swap(builder.get()).visit_expr(bound.body)
    free = relax.analysis.free_vars(body)
    used = [i for i, p in enumerate(bound.params) if any(p.same_as(v) for v in free)]
    main = relax.Function([bound.params[i] for i in used], body, bound.ret_ty)
    builder.add_func(main.with_attr("global_symbol", "main"), "main")

    # FuseOps groups the uKernel with the epilogue again, as it grouped the dispatcher in the model
    fused_mod = tvm.transform.Sequential([
        relax.transform.FuseOps(), narrow_epilogues(), relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(["main"])])(builder.get())
    funcs = [f for _, f in fused_mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(funcs) != 1:
        raise NotFusable(f"a dynamic kernel's epilogue did not fuse into its uKernel ({len(funcs)} functions)")
    return funcs[0], used


def _static_copy(func: Any, values: list[Any], name: str) -> Any:
    """A legalized function of symbolic shapes specialised to its call's static ones (its arguments', then the
    call's result); one already static as it is."""
    from tvm import tirx

    binds = {}
    for param, value in zip(func.params, values):
        shape = getattr(param, "shape", None)
        if shape is None or all(isinstance(d, tirx.IntImm) for d in shape):
            continue
        static = [tirx.IntImm(str(d.ty.dtype), int(v)) for d, v in zip(shape, value.ty.shape)]
        binds[param] = tirx.decl_buffer(static, param.dtype, param.name)
    if not binds:
        return func
    try:
        return func.specialize(binds)
    except Exception as err:  # noqa: BLE001 - a shape TVM cannot bind
        raise NotFusable(f"{name} cannot be specialised to {[list(b.shape) for b in binds.values()]}") from err


def _scheduled(func: Any, schedule_rest: Callable, vectorize: Callable | None) -> Any:
    from ..model.epilogue import schedule_fused

    done = schedule_fused(func, schedule_rest, vectorize)
    if done is None:
        raise NotFusable("a fused uKernel lost its kernel's blocks")
    return done[0]
