"""The narrow GEMM paths' packing of B in the kernel as a TVM tensor intrinsic: `group` rows of `cols` elements of B
[K, N] interleaved into the layout the dot-product and AMX instructions read, [cols, group] (one column's `group`
k elements together).

TVM vectorises that copy as a gather (each output vector reads `group` rows element by element); here it is one
call of a small LLVM IR function the kernel imports: `group` vector loads, one shuffle, one store. The elements
are moved as integers of their width, so a bf16 B is packed into the bits a kernel's own copy holds
(`dot_intrinsics.to_bits`) without converting anything.
"""

from __future__ import annotations

import functools

from .dot_intrinsics import BITS, to_bits


def _function(cols: int, group: int, bits: int) -> str:
    return f"autotune_pack_{group}x{cols}_i{bits}"


def llvm(cols: int, group: int, bits: int) -> str:
    """dst[cols, group] = src[group, cols] (rows of src `ld` bytes apart), elements of `bits` bits; `group` a power
    of two (the rows are joined pairwise)."""
    ty = f"i{bits}"
    lines = [f"  %o{r} = mul i64 %ld, {r}\n  %p{r} = getelementptr i8, ptr %src, i64 %o{r}\n"
             f"  %v0_{r} = load <{cols} x {ty}>, ptr %p{r}, align 1" for r in range(group)]
    level, width, parts = 0, cols, group
    while parts > 1:  # join neighbours: group vectors of `cols` -> one of group x cols, rows in order
        mask = ", ".join(f"i32 {i}" for i in range(2 * width))
        lines += [f"  %v{level + 1}_{r} = shufflevector <{width} x {ty}> %v{level}_{2 * r}, <{width} x {ty}> "
                  f"%v{level}_{2 * r + 1}, <{2 * width} x i32> <{mask}>" for r in range(parts // 2)]
        level, width, parts = level + 1, 2 * width, parts // 2
    order = ", ".join(f"i32 {r * cols + c}" for c in range(cols) for r in range(group))
    body = "\n".join(lines)
    return f"""
define internal void @{_function(cols, group, bits)}(ptr %dst, ptr %src, i64 %ld) alwaysinline {{
{body}
  %out = shufflevector <{width} x {ty}> %v{level}_0, <{width} x {ty}> poison, <{width} x i32> <{order}>
  store <{width} x {ty}> %out, ptr %dst, align 1
  ret void
}}
"""


@functools.lru_cache(maxsize=None)
def intrin(cols: int, group: int, storage: str, packed: str) -> str:
    """The tensor intrinsic of packing `group` rows of `cols` elements of B (`storage`) into [cols, group] of
    `packed` (the kernel's own type: bf16 as bits), registered with TVM once per process."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    bits = 8 if storage in ("int8", "uint8") else 16

    def value(x):
        return to_bits(x) if packed == BITS and storage != BITS else x

    @T.prim_func(s_tir=True)
    def desc(b: T.handle, p: T.handle) -> None:
        B = T.match_buffer(b, (group, cols), storage, offset_factor=1)
        P = T.match_buffer(p, (cols, group), packed, offset_factor=1)
        with T.sblock("root"):
            T.reads(B[0:group, 0:cols])
            T.writes(P[0:cols, 0:group])
            for j, k in T.grid(cols, group):
                with T.sblock("pack"):
                    vj, vk = T.axis.remap("SS", [j, k])
                    P[vj, vk] = value(B[vk, vj])

    @T.prim_func(s_tir=True)
    def impl(b: T.handle, p: T.handle) -> None:
        ldb = T.int32()
        B = T.match_buffer(b, (group, cols), storage, offset_factor=1, strides=[ldb, 1])
        P = T.match_buffer(p, (cols, group), packed, offset_factor=1)
        with T.sblock("root"):
            T.reads(B[0:group, 0:cols])
            T.writes(P[0:cols, 0:group])
            T.evaluate(T.call_extern("int32", _function(cols, group, bits), T.address_of(P[0, 0]),
                                     T.address_of(B[0, 0]), T.Cast("int64", ldb * (bits // 8))))

    name = f"{_function(cols, group, bits)}_{storage}_{packed}"
    TensorIntrin.register(name, desc, impl, override=True)
    return name
