"""x86 dot-product instructions as TVM tensor intrinsics: 16 int32 or fp32 lanes, each summing `group`
products of narrow inputs in one instruction.

- AVX-512 VNNI `vpdpbusd`: C[16] (int32) += sum over 4 k of A[k] (uint8, broadcast) * B[16, 4] (int8).
  TVM's own `dot_16x4_vnni` calls the LLVM intrinsic with <16 x i32> operands, which LLVM 22 (TVM 0.27's) rejects:
  it takes <64 x i8>. The implementation here reinterprets the operands.
- AVX-512 BF16 `vdpbf16ps`: C[16] (fp32) += sum over 2 k of A[k] (bf16, broadcast) * B[16, 2] (bf16).
  TVM promotes bf16 values passed to an LLVM intrinsic to fp32 (its BF16 legalization), so the instruction is
  called from a small LLVM IR function the kernel imports (`LLVM_IMPORT`, pragma `pragma_import_llvm`) and the
  intrinsic passes it pointers.

A kernel using them packs B so that a row of 16 lanes x `group` k is contiguous: [N/jb, K/group, jb, group].
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autotune.target import cpu_features
from autotune.task import Task

LANES = 16  # accumulator lanes of one instruction (one zmm register)

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


@dataclass(frozen=True)
class DotInstruction:
    """One dot-product instruction: the task dtype it computes, the CPU feature it needs, the k elements each lane
    sums (`group`), the element type of its broadcast operand, and the tensor intrinsic that emits it."""

    dtype: str
    feature: str
    group: int
    a_type: str  # what the broadcast operand is stored as in the kernel (uint8: int8 inputs shifted by 128)
    intrin: str
    llvm_import: str = ""  # LLVM IR the kernel imports for it
    # bf16 only from the kernel's arguments: TVM computes a bf16 buffer the kernel allocates in fp32, so B must
    # arrive packed (a weight) and A is not copied into padded rows
    arguments_only: bool = False


INSTRUCTIONS = (
    DotInstruction("int8", "avx512vnni", 4, "uint8", "autotune_dot_16x4_vnni"),
    DotInstruction("bfloat16", "avx512bf16", 2, "bfloat16", "autotune_dot_16x2_bf16", BF16_LLVM,
                   arguments_only=True),
)


def dot_instruction(task: Task, k: int, b_packed_ahead: bool) -> DotInstruction | None:
    """The instruction a GEMM of `task` with reduction length `k` can use on its target, or None (another dtype,
    a CPU without the extension, k not a whole number of groups, or bf16 with a B not packed ahead: the template
    then widens the inputs and multiplies in the accumulation type)."""
    if task.target_kind != "llvm":
        return None
    features = cpu_features(task.target)
    for ins in INSTRUCTIONS:
        if ins.dtype == task.dtype and ins.feature in features and "avx512f" in features and k % ins.group == 0 \
                and (b_packed_ahead or not ins.arguments_only):
            register_intrinsics()
            return ins
    return None


@functools.lru_cache(maxsize=None)
def register_intrinsics() -> None:
    """Register the tensor intrinsics with TVM, once per process."""
    from tvm.s_tir import TensorIntrin

    vnni, bf16 = INSTRUCTIONS
    TensorIntrin.register(vnni.intrin, *_vnni(), override=True)
    TensorIntrin.register(bf16.intrin, *_bf16(), override=True)


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
                        C[vi] = C[vi] + T.cast(A[vk], acc) * T.cast(B[vi, vk], acc)

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

    return _desc(4, "uint8", "int8", "int32"), impl


def _bf16():
    """C[16] (fp32) += A[2] x B[16, 2] (bf16)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((2,), "bfloat16", offset_factor=1), B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
             C: T.Buffer((16,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            T.evaluate(T.call_extern("int32", "autotune_dpbf16_16x2", T.address_of(C[0]), T.address_of(A[0]),
                                     T.address_of(B[0, 0])))

    return _desc(2, "bfloat16", "bfloat16", "float32"), impl
