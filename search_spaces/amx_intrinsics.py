"""Intel AMX as TVM tensor intrinsics: a 32 x 32 block of C (four 16 x 16 accumulator tiles) summed over a k
chunk with `tdpbssd` (int8 x int8 -> int32) or `tdpbf16ps` (bf16 x bf16 -> fp32).

The block is one call of a small LLVM IR function the kernel imports (pragma `pragma_import_llvm`). It configures
the tiles (every call: a thread's tile configuration is its own), loads the four C tiles, runs the k chunk 64 bytes
of A at a time (two A tiles of 16 rows, two B tiles of 16 columns, four tile products) and stores C back. A is
read in place (rows `lda` bytes apart); B in rows of one k group (32 columns x `group` elements, `ldb` bytes
apart), so a k step of B is 16 such rows. The call sums R x S taps, each an offset into A and into B:
- a GEMM (`intrin`) is one tap, B packed [N/32, K/group, 32, group] as for the dot-product instructions;
- a convolution (`conv_intrin`, `conv2d_amx`) has A the weight [R, S, rows, channels] and B the input as 32-bit
  words of `group` channels, a tap's 32 columns a fixed number of words on from the previous tap's.
The first call in a process asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM): without it the
first tile instruction is SIGILL.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autotune.target import cpu_features
from autotune.task import Task

from .dot_intrinsics import operand_value

ROWS = COLS = 32  # the C block of one call: 2 x 2 tiles of 16 x 16
WORD = "uint32"  # a convolution's input copy: `group` elements per word (one column of a B tile row)
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

    def conv_intrin(self, kc: int, taps: tuple[int, int], tap_step: tuple[int, int], a_type: str) -> str:
        """The tensor intrinsic of one 32 x 32 block of a convolution as a GEMM (`conv2d_amx`): A the weight
        [R, S, 32 output channels, kc], B the input as 32-bit words of `group` channels [kc / group, span], the
        32 columns of tap (r, s) starting r * tap_step[0] + s * tap_step[1] words on."""
        return _register_conv(self, kc, taps, tap_step, a_type)


INSTRUCTIONS = (
    TileInstruction("int8", "amx-int8", 4, "int8", "tdpbssd", 1, "int32"),
    TileInstruction("bfloat16", "amx-bf16", 2, "bfloat16", "tdpbf16ps", 2, "float32"),
)


def amx_instruction(task: Task) -> TileInstruction | None:
    """The AMX instruction of the task's dtype where its target has it, else None."""
    if task.target_kind != "llvm":
        return None
    features = cpu_features(task.target)
    return next((ins for ins in INSTRUCTIONS if ins.dtype == task.dtype and {ins.feature, "amx-tile"} <= features),
                None)


def tile_instruction(task: Task, m: int, k: int) -> TileInstruction | None:
    """The AMX instruction an m x n x k GEMM of `task` can use on its target, or None: another dtype, a CPU without
    AMX, k not whole k steps, or fewer than 32 rows (the dot-product instructions do better on so few)."""
    ins = amx_instruction(task)
    return ins if ins and m >= ROWS and k % ins.k_step == 0 else None


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
                                     lda * ins.element_bytes, 0, 0, T.address_of(B[0, 0, 0, 0]),
                                     COLS * ins.group * ins.element_bytes, 0, 0, kc, 1, 1))

    TensorIntrin.register(name, desc, impl, override=True)
    return name


@functools.lru_cache(maxsize=None)
def _register_conv(ins: TileInstruction, kc: int, taps: tuple[int, int], tap_step: tuple[int, int],
                   a_type: str) -> str:
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    g, acc, (nr, ns), (step_r, step_s) = kc // ins.group, ins.accumulate, taps, tap_step
    span = COLS + (nr - 1) * step_r + (ns - 1) * step_s
    name = f"{ins.function}_conv_k{kc}_{nr}x{ns}_{step_r}_{step_s}_{a_type}"

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (nr, ns, ROWS, kc), a_type, offset_factor=1)
        B = T.match_buffer(b, (g, span), WORD, offset_factor=1)
        C = T.match_buffer(c, (ROWS, COLS), acc, offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:ROWS, 0:COLS], A[0:nr, 0:ns, 0:ROWS, 0:kc], B[0:g, 0:span])
            T.writes(C[0:ROWS, 0:COLS])
            for i, j, r, s, k, kk in T.grid(ROWS, COLS, nr, ns, g, ins.group):
                with T.sblock("update"):
                    vi, vj, vr, vs, vk, vkk = T.axis.remap("SSRRRR", [i, j, r, s, k, kk])
                    C[vi, vj] = C[vi, vj] + (
                        operand_value(A[vr, vs, vi, vk * ins.group + vkk], a_type, acc)
                        * word_element(B[vk, vj + vr * step_r + vs * step_s], vkk, ins))

    @T.prim_func(s_tir=True)
    def desc_1x1(a: T.handle, b: T.handle, c: T.handle) -> None:  # no tap axes: a block drops axes of extent 1
        A = T.match_buffer(a, (1, 1, ROWS, kc), a_type, offset_factor=1)
        B = T.match_buffer(b, (g, COLS), WORD, offset_factor=1)
        C = T.match_buffer(c, (ROWS, COLS), acc, offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:ROWS, 0:COLS], A[0:1, 0:1, 0:ROWS, 0:kc], B[0:g, 0:COLS])
            T.writes(C[0:ROWS, 0:COLS])
            for i, j, k, kk in T.grid(ROWS, COLS, g, ins.group):
                with T.sblock("update"):
                    vi, vj, vk, vkk = T.axis.remap("SSRR", [i, j, k, kk])
                    C[vi, vj] = C[vi, vj] + (operand_value(A[0, 0, vi, vk * ins.group + vkk], a_type, acc)
                                             * word_element(B[vk, vj], vkk, ins))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a_r = T.int32()
        a_s = T.int32()
        lda = T.int32()
        ldb = T.int32()
        ldc = T.int32()
        A = T.match_buffer(a, (nr, ns, ROWS, kc), a_type, offset_factor=1, strides=[a_r, a_s, lda, 1])
        B = T.match_buffer(b, (g, span), WORD, offset_factor=1, strides=[ldb, 1])
        C = T.match_buffer(c, (ROWS, COLS), acc, offset_factor=1, strides=[ldc, 1])
        with T.sblock("root"):
            T.reads(C[0:ROWS, 0:COLS], A[0:nr, 0:ns, 0:ROWS, 0:kc], B[0:g, 0:span])
            T.writes(C[0:ROWS, 0:COLS])
            T.evaluate(T.call_extern(
                "int32", ins.function, T.address_of(C[0, 0]), ldc * 4, T.address_of(A[0, 0, 0, 0]),
                lda * ins.element_bytes, a_r * ins.element_bytes, a_s * ins.element_bytes, T.address_of(B[0, 0]),
                ldb * 4, step_r * 4, step_s * 4, kc, nr, ns))

    TensorIntrin.register(name, desc_1x1 if taps == (1, 1) else desc, impl, override=True)
    return name


def word_element(word, index, ins: TileInstruction):
    """Element `index` of the `group` elements a 32-bit word of a conv input copy holds (`pack_word`), in the
    accumulation type."""
    from tvm import tirx

    if ins.dtype == "int8":
        byte = tirx.shift_right(word, (index * 8).astype(WORD))
        return byte.astype("int8").astype(ins.accumulate)
    half = tirx.shift_right(word, (index * 16).astype(WORD))
    return tirx.reinterpret("float32", tirx.shift_left(half, tirx.const(16, WORD)))


def pack_word(values, ins: TileInstruction):
    """The 32-bit word holding `group` consecutive elements (TE values of the task's storage type), the first in
    the low bits: their memory layout as the tile loads read it."""
    from tvm import tirx

    from .dot_intrinsics import to_bits

    bits = 8 if ins.dtype == "int8" else 16
    word = tirx.const(0, WORD)
    for i, value in enumerate(values):
        raw = value.astype("uint8") if bits == 8 else to_bits(value)
        word = word | tirx.shift_left(raw.astype(WORD), tirx.const(bits * i, WORD))
    return word


def _tap_head(axis: str, entry: str, a: str, b: str, a_out: str, b_out: str, body: str) -> str:
    """The head of the loop over taps along `axis` ("r" or "s", strides %a<axis> and %b<axis> bytes): A's and B's
    pointers `a`, `b` moved to the tap, as `a_out`, `b_out`."""
    return f"""{axis}loop:
  %{axis} = phi i64 [0, %{entry}], [%{axis}n, %{axis}next]
  %a{axis}o = mul i64 %{axis}, %a{axis}
  %b{axis}o = mul i64 %{axis}, %b{axis}
  %{a_out} = getelementptr i8, ptr %{a}, i64 %a{axis}o
  %{b_out} = getelementptr i8, ptr %{b}, i64 %b{axis}o
  br label %{body}"""


def _llvm(ins: TileInstruction) -> str:
    """The block function: C[32, 32] (rows ldc bytes apart) += sum over R x S taps of A_t[32, kc] B_t, tap (r, s)
    at a + r a_r + s a_s and b + r b_r + s b_s (strides in bytes); A rows lda bytes apart; B in rows of one k group
    (32 columns x group elements) ldb bytes apart. A GEMM is one tap."""
    return f"""
@autotune_amx_ready = internal global i8 0
declare i64 @syscall(i64, ...)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.{ins.op}(i8 immarg, i8 immarg, i8 immarg)

define internal void @{ins.function}(ptr %c, i32 %ldc32, ptr %a, i32 %lda32, i32 %ar32, i32 %as32, ptr %b,
                                     i32 %ldb32, i32 %br32, i32 %bs32, i32 %kc32, i32 %nr32, i32 %ns32) {{
entry:
  %ready = load i8, ptr @autotune_amx_ready
  %is = icmp ne i8 %ready, 0
  br i1 %is, label %cfg, label %perm
perm:                                   ; arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
  %r0 = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store i8 1, ptr @autotune_amx_ready
  br label %cfg
cfg:                                    ; palette 1; tiles 0-7: 16 rows of 64 bytes
  %conf = alloca [64 x i8], align 64
  call void @llvm.memset.p0.i64(ptr align 64 %conf, i8 0, i64 64, i1 false)
  store i8 1, ptr %conf
  %colsb = getelementptr i8, ptr %conf, i64 16
  store <8 x i16> <i16 64, i16 64, i16 64, i16 64, i16 64, i16 64, i16 64, i16 64>, ptr %colsb, align 2
  %rowsp = getelementptr i8, ptr %conf, i64 48
  store <8 x i8> <i8 16, i8 16, i8 16, i8 16, i8 16, i8 16, i8 16, i8 16>, ptr %rowsp, align 1
  call void @llvm.x86.ldtilecfg(ptr %conf)
  %ldc = sext i32 %ldc32 to i64
  %lda = sext i32 %lda32 to i64
  %ldb = sext i32 %ldb32 to i64
  %ar = sext i32 %ar32 to i64
  %as = sext i32 %as32 to i64
  %br = sext i32 %br32 to i64
  %bs = sext i32 %bs32 to i64
  %nr = sext i32 %nr32 to i64
  %ns = sext i32 %ns32 to i64
  %kc = sext i32 %kc32 to i64
  %kbytes = mul i64 %kc, {ins.element_bytes}
  %steps = lshr i64 %kbytes, 6
  %c1 = getelementptr i8, ptr %c, i64 64
  %c16 = mul i64 %ldc, 16
  %c2 = getelementptr i8, ptr %c, i64 %c16
  %c3 = getelementptr i8, ptr %c2, i64 64
  call void @llvm.x86.tileloadd64(i8 0, ptr %c, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 1, ptr %c1, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 2, ptr %c2, i64 %ldc)
  call void @llvm.x86.tileloadd64(i8 3, ptr %c3, i64 %ldc)
  %a16 = mul i64 %lda, 16
  %b16 = mul i64 %ldb, 16
  br label %rloop
{_tap_head("r", "cfg", "a", "b", "ar0", "br0", "sloop")}
{_tap_head("s", "rloop", "ar0", "br0", "at", "bt", "kloop")}
kloop:                                  ; one k step: 64 bytes of A's rows, 16 rows of B
  %k = phi i64 [0, %sloop], [%kn, %kloop]
  %ao = mul i64 %k, 64
  %ak = getelementptr i8, ptr %at, i64 %ao
  %ak1 = getelementptr i8, ptr %ak, i64 %a16
  %bo = mul i64 %k, %b16
  %bk = getelementptr i8, ptr %bt, i64 %bo
  %bk1 = getelementptr i8, ptr %bk, i64 64
  call void @llvm.x86.tileloadd64(i8 4, ptr %ak, i64 %lda)
  call void @llvm.x86.tileloadd64(i8 5, ptr %ak1, i64 %lda)
  call void @llvm.x86.tileloadd64(i8 6, ptr %bk, i64 %ldb)
  call void @llvm.x86.tileloadd64(i8 7, ptr %bk1, i64 %ldb)
  call void @llvm.x86.{ins.op}(i8 0, i8 4, i8 6)
  call void @llvm.x86.{ins.op}(i8 1, i8 4, i8 7)
  call void @llvm.x86.{ins.op}(i8 2, i8 5, i8 6)
  call void @llvm.x86.{ins.op}(i8 3, i8 5, i8 7)
  %kn = add i64 %k, 1
  %kdone = icmp sge i64 %kn, %steps
  br i1 %kdone, label %snext, label %kloop
snext:
  %sn = add i64 %s, 1
  %sdone = icmp sge i64 %sn, %ns
  br i1 %sdone, label %rnext, label %sloop
rnext:
  %rn = add i64 %r, 1
  %rdone = icmp sge i64 %rn, %nr
  br i1 %rdone, label %exit, label %rloop
exit:
  call void @llvm.x86.tilestored64(i8 0, ptr %c, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 1, ptr %c1, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 2, ptr %c2, i64 %ldc)
  call void @llvm.x86.tilestored64(i8 3, ptr %c3, i64 %ldc)
  ret void
}}
"""
