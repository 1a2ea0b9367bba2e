"""x86 dot-product instructions as TVM tensor intrinsics: 16 int32 or fp32 lanes, each summing `group`
products of narrow inputs in one instruction.

- AVX-512 VNNI `vpdpbusd`: C[16] (int32) += sum over 4 k of A[k] (uint8, broadcast) * B[16, 4] (int8).
  TVM's own `dot_16x4_vnni` calls the LLVM intrinsic with <16 x i32> operands, which LLVM 22 (TVM 0.27's) rejects:
  it takes <64 x i8>. The implementation here reinterprets the operands.
- AVX-512 BF16 `vdpbf16ps`: C[16] (fp32) += sum over 2 k of A[k] (bf16, broadcast) * B[16, 2] (bf16).
  TVM promotes bf16 values passed to an LLVM intrinsic to fp32 (its BF16 legalization), so the instruction is
  called from a small LLVM IR function the kernel imports (`BF16_LLVM`, pragma `pragma_import_llvm`) and the
  intrinsic passes it pointers.

A kernel using them packs B so that a row of 16 lanes x `group` k is contiguous: [N/jb, K/group, jb, group].

An operand may be a buffer the kernel fills itself (B packed in the kernel, A copied into padded rows). TVM computes
a bf16 buffer of a kernel's own in fp32, so such a copy of bf16 values holds their bits as uint16 (`to_bits`), and
the intrinsics exist for either type of each operand (`operand_value` reads both alike).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autotune.target import cpu_features
from autotune.task import Task

LANES = 16  # accumulator lanes of one instruction (one zmm register)
BITS = "uint16"  # a kernel's own copy of bf16 values: their bits

BF16_LLVM = """
define internal void @autotune_dpbf16_16x2(ptr %c, ptr %a, ptr %b) alwaysinline {
  %cv = load <16 x float>, ptr %c, align 4
  %a32 = load i32, ptr %a, align 2
  %ab = insertelement <16 x i32> poison, i32 %a32, i32 0
  %abc = shufflevector <16 x i32> %ab, <16 x i32> poison, <16 x i32> zeroinitializer
  %av = bitcast <16 x i32> %abc to <32 x bfloat>
  %bv = load <32 x bfloat>, ptr %b, align 2
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %cv, <32 x bfloat> %av, <32 x bfloat> %bv)
  store <16 x float> %r, ptr %c, align 4
  ret void
}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""


def to_bits(value):
    """A bf16 value's bits as uint16: the top half of its (exact) fp32 value, as TVM computes bf16 in fp32."""
    from tvm import tirx

    as_int = tirx.reinterpret("uint32", value.astype("float32"))
    return tirx.shift_right(as_int, tirx.const(16, "uint32")).astype(BITS)


def operand_value(value, kind: str, acc: str):
    """An operand element of type `kind` in the accumulation type: cast, or, for bf16 bits, shifted back into an
    fp32."""
    from tvm import tirx

    if kind == BITS:
        return tirx.reinterpret("float32", tirx.shift_left(value.astype("uint32"), tirx.const(16, "uint32")))
    return value.astype(acc)


def kernel_type(storage: str) -> str:
    """The type a kernel's own copy of values of `storage` has (bf16: their bits)."""
    return BITS if storage == "bfloat16" else storage


@dataclass(frozen=True)
class DotInstruction:
    """One dot-product instruction: the task dtype it computes, the CPU feature it needs, the k elements each lane
    sums (`group`), the element type of its broadcast operand, its accumulation type, and how it is emitted."""

    dtype: str
    feature: str
    group: int
    a_type: str  # what the broadcast operand is in the kernel (uint8: int8 inputs shifted by 128)
    accumulate: str
    name: str
    llvm_import: str = ""  # LLVM IR the kernel imports for it

    def intrin(self, a_type: str, b_type: str) -> str:
        """The tensor intrinsic for operands of these types (`kernel_type`), registered with TVM once per
        process."""
        return _register(self, a_type, b_type)


INSTRUCTIONS = (
    DotInstruction("int8", "avx512vnni", 4, "uint8", "int32", "autotune_dot_16x4_vnni"),
    DotInstruction("bfloat16", "avx512bf16", 2, "bfloat16", "float32", "autotune_dot_16x2_bf16", BF16_LLVM),
)


def dot_instruction(task: Task, k: int) -> DotInstruction | None:
    """The instruction a GEMM of `task` with reduction length `k` can use on its target, or None (another dtype,
    a CPU without the extension, or k not a whole number of groups: the template then widens the inputs and
    multiplies in the accumulation type)."""
    if task.target_kind != "llvm":
        return None
    features = cpu_features(task.target)
    for ins in INSTRUCTIONS:
        if ins.dtype == task.dtype and ins.feature in features and "avx512f" in features and k % ins.group == 0:
            return ins
    return None


@functools.lru_cache(maxsize=None)
def _register(ins: DotInstruction, a_type: str, b_type: str) -> str:
    from tvm.s_tir import TensorIntrin

    name = f"{ins.name}_{a_type}_{b_type}"
    impl = _vnni() if ins.feature == "avx512vnni" else _bf16(a_type, b_type)
    TensorIntrin.register(name, _desc(ins.group, a_type, b_type, ins.accumulate), impl, override=True)
    return name


def _desc(group: int, a_type: str, b_type: str, acc: str):
    """What an instruction computes: C[16] (acc) += sum over `group` k of A[k] (broadcast) * B[16, k]."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((group,), a_type, offset_factor=1), B: T.Buffer((16, group), b_type, offset_factor=1),
             C: T.Buffer((16,), acc, offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:group], B[0:16, 0:group])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + operand_value(A[vk], a_type, acc) * operand_value(B[vi, vk], b_type, acc)

    return desc


def _vnni():
    """C[16] (int32) += A[4] (uint8) x B[16, 4] (int8). (TVM's own description, in `tvm.s_tir.tensor_intrin.x86`,
    is the same; importing that package registers every intrinsic TVM has and takes tens of seconds.)"""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((16, 4), "int8", offset_factor=1),
             C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a_i32 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a_u8 = T.reinterpret(T.broadcast(a_i32, 16), dtype="int8x64")
            b_i8 = B.vload([0, 0], dtype="int8x64")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                C.vload([0], dtype="int32x16"), a_u8, b_i8, dtype="int32x16")

    return impl


def _bf16(a_type: str, b_type: str):
    """C[16] (fp32) += A[2] x B[16, 2]: bf16 values, or their bits."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((2,), a_type, offset_factor=1), B: T.Buffer((16, 2), b_type, offset_factor=1),
             C: T.Buffer((16,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            T.evaluate(T.call_extern("int32", "autotune_dpbf16_16x2", T.address_of(C[0]), T.address_of(A[0]),
                                     T.address_of(B[0, 0])))

    return impl
