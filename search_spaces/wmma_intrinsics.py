"""CUDA tensor cores through WMMA (`nvcuda::wmma`, 16 x 16 x 16 fragments) as TVM tensor intrinsics: fp16 x fp16 or
bf16 x bf16 products (OPERANDS) summed in fp32.

The same five intrinsics as TVM's `tvm.s_tir.tensor_intrin.cuda` (fill, load A, load B, multiply-accumulate,
store), for the few variants the tensor-core GEMM template uses (`cuda_gemm_tc`), registered here once per process
under names of their own: importing TVM's module registers every intrinsic it has, for every target, and takes
15-25 s in each process that builds a kernel.

A fragment's index in its scope's buffer comes from the buffer's element offset, as TVM's own intrinsics compute it.
"""

from __future__ import annotations

import functools

FRAGMENT = 16  # rows, columns and depth of one fragment product
ACCUMULATOR = "float32"
OPERANDS = ("float16", "bfloat16")  # the fragments' input types (bf16: sm_80 on)


def _fragment_index(buffer, stride, rows: int, cols: int):
    """Which fragment of its scope's buffer `buffer` is (fragments laid row-major, `stride` elements a row)."""
    return buffer.elem_offset // stride // rows * (stride // cols) + buffer.elem_offset % stride // cols


@functools.lru_cache(maxsize=None)
def fill() -> str:
    """C (accumulator fragment) = 0."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    n = FRAGMENT

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (n, n), ACCUMULATOR, align=64, offset_factor=n, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:n, 0:n])
            for i, j in T.grid(n, n):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        d1 = T.int32()
        d0 = T.int32()
        C = T.match_buffer(c, (n, n), ACCUMULATOR, align=64, offset_factor=n, scope="wmma.accumulator",
                           strides=[d1, d0])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:n, 0:n])
            T.evaluate(T.tvm_fill_fragment(C.data, n, n, n, _fragment_index(C, d1, n, n), T.float32(0),
                                           dtype="void"))

    TensorIntrin.register("autotune_wmma_fill_f32", desc, impl, override=True)
    return "autotune_wmma_fill_f32"


def _fragment_copy(name: str, dtype: str, src_scope: str, dst_scope: str, call) -> str:
    """Register a 16 x 16 copy from `src_scope` to `dst_scope` done by `call(A, C, a_stride, c_stride)` (A the
    source, C the destination, their row strides)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    n = FRAGMENT

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (n, n), dtype, align=64, offset_factor=n, scope=src_scope)
        C = T.match_buffer(c, (n, n), dtype, align=64, offset_factor=n, scope=dst_scope)
        with T.sblock("root"):
            T.reads(A[0:n, 0:n])
            T.writes(C[0:n, 0:n])
            for i, j in T.grid(n, n):
                with T.sblock("copy"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, (n, n), dtype, align=64, offset_factor=n, scope=src_scope, strides=[a1, a0])
        C = T.match_buffer(c, (n, n), dtype, align=64, offset_factor=n, scope=dst_scope, strides=[c1, c0])
        with T.sblock("root"):
            T.reads(A[0:n, 0:n])
            T.writes(C[0:n, 0:n])
            T.evaluate(call(A, C, a1, c1))

    TensorIntrin.register(name, desc, impl, override=True)
    return name


@functools.lru_cache(maxsize=None)
def load(operand: str, scope: str, col_major: bool, dtype: str) -> str:
    """A fragment of operand "a" or "b" (of `dtype`) loaded from shared memory (`scope`: "shared" or
    "shared.dyn"), stored row-major, or column-major (dense's W, [N, K]: the fragment B' is W's tile transposed)."""
    from tvm.script import tirx as T

    n, layout = FRAGMENT, "col_major" if col_major else "row_major"

    def call(A, C, a_stride, c_stride):
        return T.tvm_load_matrix_sync(C.data, n, n, n, _fragment_index(C, c_stride, n, n),
                                      A.access_ptr("r", ptr_type=dtype), a_stride, layout, dtype="void")

    name = f"autotune_wmma_load_{operand}_{dtype}_{scope.replace('.', '_')}_{layout}"
    return _fragment_copy(name, dtype, scope, f"wmma.matrix_{operand}", call)


@functools.lru_cache(maxsize=None)
def multiply(b_transposed: bool, dtype: str) -> str:
    """C += A B (fragments of `dtype`, fp32 sums); B's fragment indexed [n, k] when `b_transposed` (dense)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    n = FRAGMENT

    def b_at(B, k, j):
        return B[j, k] if b_transposed else B[k, j]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (n, n), dtype, align=64, offset_factor=n, scope="wmma.matrix_a")
        B = T.match_buffer(b, (n, n), dtype, align=64, offset_factor=n, scope="wmma.matrix_b")
        C = T.match_buffer(c, (n, n), ACCUMULATOR, align=64, offset_factor=n, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads(C[0:n, 0:n], A[0:n, 0:n], B[0:n, 0:n])
            T.writes(C[0:n, 0:n])
            for i, j, k in T.grid(n, n, n):
                with T.sblock(""):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.Cast(ACCUMULATOR, A[vi, vk]) * T.Cast(ACCUMULATOR, b_at(B, vk, vj))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        b1 = T.int32()
        b0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, (n, n), dtype, align=64, offset_factor=n, scope="wmma.matrix_a", strides=[a1, a0])
        B = T.match_buffer(b, (n, n), dtype, align=64, offset_factor=n, scope="wmma.matrix_b", strides=[b1, b0])
        C = T.match_buffer(c, (n, n), ACCUMULATOR, align=64, offset_factor=n, scope="wmma.accumulator",
                           strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:n, 0:n], A[0:n, 0:n], B[0:n, 0:n])
            T.writes(C[0:n, 0:n])
            T.evaluate(T.tvm_mma_sync(C.data, _fragment_index(C, c1, n, n), A.data, _fragment_index(A, a1, n, n),
                                      B.data, _fragment_index(B, b1, n, n), C.data, _fragment_index(C, c1, n, n),
                                      dtype="void"))

    name = f"autotune_wmma_mma_{dtype}_f32{'_trans' if b_transposed else ''}"
    TensorIntrin.register(name, desc, impl, override=True)
    return name


@functools.lru_cache(maxsize=None)
def store(scope: str) -> str:
    """An accumulator fragment stored (row-major, fp32) to `scope` ("shared", "shared.dyn" or "global")."""
    from tvm.script import tirx as T

    n = FRAGMENT

    def call(A, C, a_stride, c_stride):
        return T.tvm_store_matrix_sync(A.data, n, n, n, _fragment_index(A, a_stride, n, n),
                                       C.access_ptr("w", ptr_type=ACCUMULATOR), c_stride, "row_major", dtype="void")

    return _fragment_copy(f"autotune_wmma_store_f32_{scope.replace('.', '_')}", ACCUMULATOR, "wmma.accumulator",
                          scope, call)
