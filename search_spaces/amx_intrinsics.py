"""Intel AMX as TVM tensor intrinsics: a 32 x 32 block of C (four 16 x 16 accumulator tiles) summed over a k
chunk with `tdpbssd` (int8 x int8 -> int32) or `tdpbf16ps` (bf16 x bf16 -> fp32).

The block is one call of a small LLVM IR function the kernel imports (pragma `pragma_import_llvm`). It configures
the tiles (every call: a thread's tile configuration is its own), loads the four C tiles, runs the k chunk 64 bytes
of A at a time (two A tiles of 16 rows, two B tiles of 16 columns, four tile products) and stores C back. A is
read in place (rows `lda` bytes apart); B packed [N/32, K/group, 32, group] as for the dot-product instructions,
so a k step of B is 16 rows of 128 bytes. The first call in a process asks Linux for the AMX tile state
(arch_prctl ARCH_REQ_XCOMP_PERM): without it the first tile instruction is SIGILL.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autotune.target import cpu_features
from autotune.task import Task

from .dot_intrinsics import operand_value

ROWS = COLS = 32  # the C block of one call: 2 x 2 tiles of 16 x 16
K_BYTES = 64  # bytes of A (and of a B tile's row) per k step


@dataclass(frozen=True)
class TileInstruction:
    """One AMX tile product: the dtype it computes, its CPU feature, the k elements a B tile row holds per column
    (`group`), its mnemonic and element size. `a_type` is A's type in the kernel (as the dot-product instructions
    have it; AMX multiplies int8 by int8, so nothing is shifted)."""

    dtype: str
    feature: str
    group: int
    a_type: str
    op: str
    element_bytes: int
    accumulate: str

    @property
    def k_step(self) -> int:
        """k elements per tile product."""
        return K_BYTES // self.element_bytes

    @property
    def function(self) -> str:
        return f"autotune_amx_{self.dtype}_32x32"

    @property
    def llvm_import(self) -> str:
        return _llvm(self)

    def intrin(self, kc: int, a_type: str, b_type: str) -> str:
        """The tensor intrinsic of one 32 x 32 block over `kc` k elements (a multiple of k_step), for operands of
        these types (`dot_intrinsics.kernel_type`), registered with TVM once per process."""
        return _register(self, kc, a_type, b_type)


INSTRUCTIONS = (
    TileInstruction("int8", "amx-int8", 4, "int8", "tdpbssd", 1, "int32"),
    TileInstruction("bfloat16", "amx-bf16", 2, "bfloat16", "tdpbf16ps", 2, "float32"),
)


def tile_instruction(task: Task, m: int, k: int) -> TileInstruction | None:
    """The AMX instruction an m x n x k GEMM of `task` can use on its target, or None: another dtype, a CPU without
    AMX, k not whole k steps, or fewer than 32 rows (the dot-product instructions do better on so few)."""
    if task.target_kind != "llvm" or m < ROWS:
        return None
    features = cpu_features(task.target)
    for ins in INSTRUCTIONS:
        if ins.dtype == task.dtype and {ins.feature, "amx-tile"} <= features and k % ins.k_step == 0:
            return ins
    return None


@functools.lru_cache(maxsize=None)
def _register(ins: TileInstruction, kc: int, a_type: str, b_type: str) -> str:
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    g, acc, name = kc // ins.group, ins.accumulate, f"{ins.function}_k{kc}_{a_type}_{b_type}"

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (ROWS, kc), a_type, offset_factor=1)
        B = T.match_buffer(b, (1, g, COLS, ins.group), b_type, offset_factor=1)
        C = T.match_buffer(c, (ROWS, COLS), acc, offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:ROWS, 0:COLS], A[0:ROWS, 0:kc], B[0:1, 0:g, 0:COLS, 0:ins.group])
            T.writes(C[0:ROWS, 0:COLS])
            for i, j, k, kk in T.grid(ROWS, COLS, g, ins.group):
                with T.sblock("update"):
                    vi, vj, vk, vkk = T.axis.remap("SSRR", [i, j, k, kk])
                    C[vi, vj] = C[vi, vj] + (operand_value(A[vi, vk * ins.group + vkk], a_type, acc)
                                             * operand_value(B[0, vk, vj, vkk], b_type, acc))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        lda = T.int32()
        ldc = T.int32()
        A = T.match_buffer(a, (ROWS, kc), a_type, offset_factor=1, strides=[lda, 1])
        B = T.match_buffer(b, (1, g, COLS, ins.group), b_type, offset_factor=1)
        C = T.match_buffer(c, (ROWS, COLS), acc, offset_factor=1, strides=[ldc, 1])
        with T.sblock("root"):
            T.reads(C[0:ROWS, 0:COLS], A[0:ROWS, 0:kc], B[0:1, 0:g, 0:COLS, 0:ins.group])
            T.writes(C[0:ROWS, 0:COLS])
            T.evaluate(T.call_extern("int32", ins.function, T.address_of(C[0, 0]), ldc * 4, T.address_of(A[0, 0]),
                                     lda * ins.element_bytes, T.address_of(B[0, 0, 0, 0]), kc))

    TensorIntrin.register(name, desc, impl, override=True)
    return name


def _llvm(ins: TileInstruction) -> str:
    """The block function: C[32, 32] (rows ldc bytes apart) += A[32, kc] (rows lda bytes apart) x B (packed)."""
    b_row = COLS * ins.group * ins.element_bytes  # bytes of one packed B row (one k group, 32 columns)
    return f"""
@autotune_amx_ready = internal global i8 0
declare i64 @syscall(i64, ...)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.{ins.op}(i8 immarg, i8 immarg, i8 immarg)

define internal void @{ins.function}(ptr %c, i32 %ldc32, ptr %a, i32 %lda32, ptr %b, i32 %kc32) {{
entry:
  %ready = load i8, ptr @autotune_amx_ready
  %is = icmp ne i8 %ready, 0
  br i1 %is, label %cfg, label %perm
perm:                                   ; arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
  %r = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store i8 1, ptr @autotune_amx_ready
  br label %cfg
cfg:                                    ; palette 1; tiles 0-7: 16 rows of 64 bytes
  %conf = alloca [64 x i8], align 64
  call void @llvm.memset.p0.i64(ptr align 64 %conf, i8 0, i64 64, i1 false)
  store i8 1, ptr %conf
  %colsb = getelementptr i8, ptr %conf, i64 16
  store <8 x i16> <i16 64, i16 64, i16 64, i16 64, i16 64, i16 64, i16 64, i16 64>, ptr %colsb, align 2
  %rows = getelementptr i8, ptr %conf, i64 48
  store <8 x i8> <i8 16, i8 16, i8 16, i8 16, i8 16, i8 16, i8 16, i8 16>, ptr %rows, align 1
  call void @llvm.x86.ldtilecfg(ptr %conf)
  %ldc = sext i32 %ldc32 to i64
  %lda = sext i32 %lda32 to i64
  %kc = sext i32 %kc32 to i64
  %c1 = getelementptr i8, ptr %c, i64 64
  %c16 = mul i64 %ldc, 16
  %c2 = getelementptr i8, ptr %c, i64 %c16
  %c3 = getelementptr i8, ptr %c2, i64 64
  call void @llvm.x86.tileloadd64(i8 0, ptr %c, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 1, ptr %c1, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 2, ptr %c2, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 3, ptr %c3, i64 %ldc)
  %a16 = mul i64 %lda, 16
  br label %loop
loop:                                   ; k in elements, {ins.k_step} per step
  %k = phi i64 [0, %cfg], [%kn, %loop]
  %ao = mul i64 %k, {ins.element_bytes}
  %ak = getelementptr i8, ptr %a, i64 %ao
  %ak1 = getelementptr i8, ptr %ak, i64 %a16
  %bo = mul i64 %k, {b_row // ins.group}
  %bk = getelementptr i8, ptr %b, i64 %bo
  %bk1 = getelementptr i8, ptr %bk, i64 64
  call void @llvm.x86.tileloadd64(i8 4, ptr %ak, i64 %lda)
  call void @llvm.x86.tileloadd64(i8 5, ptr %ak1, i64 %lda)
  call void @llvm.x86.tileloadd64(i8 6, ptr %bk, i64 {b_row})
  call void @llvm.x86.tileloadd64(i8 7, ptr %bk1, i64 {b_row})
  call void @llvm.x86.{ins.op}(i8 0, i8 4, i8 6)
  call void @llvm.x86.{ins.op}(i8 1, i8 4, i8 7)
  call void @llvm.x86.{ins.op}(i8 2, i8 5, i8 6)
  call void @llvm.x86.{ins.op}(i8 3, i8 5, i8 7)
  %kn = add i64 %k, {ins.k_step}
  %done = icmp sge i64 %kn, %kc
  br i1 %done, label %exit, label %loop
exit:
  call void @llvm.x86.tilestored64(i8 0, ptr %c, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 1, ptr %c1, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 2, ptr %c2, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 3, ptr %c3, i64 %ldc)
  ret void
}}
"""
