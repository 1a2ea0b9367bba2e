"""The GEMM family: matmul, dense (a linear layer without bias) and batch_matmul. Main block "C"."""

from __future__ import annotations

from .definition import OpDef, Params, RowSplit
from .dtypes import element_type, in_type, output_of


def gemm_output(acc, dtype: str):
    """The output of a GEMM whose sums are `acc` ("C"), rounded where the dtype says in a block "C_out"."""
    return output_of(acc, dtype, "C_out")


def _matmul_compute(p: Params, dtype: str):
    from tvm import te
    kind = element_type(dtype)
    A = te.placeholder((p["M"], p["K"]), kind.storage, name="A")
    B = te.placeholder((p["K"], p["N"]), kind.storage, name="B")
    k = te.reduce_axis((0, p["K"]), name="k")
    acc = kind.accumulate
    C = te.compute((p["M"], p["N"]), lambda i, j: te.sum(in_type(A[i, k], acc) * in_type(B[k, j], acc), axis=k),
                   name="C")
    return [A, B, gemm_output(C, dtype)]


def _dense_compute(p: Params, dtype: str):
    from tvm import te
    kind = element_type(dtype)
    X = te.placeholder((p["batch"], p["in_features"]), kind.storage, name="X")
    W = te.placeholder((p["out_features"], p["in_features"]), kind.storage, name="W")
    k = te.reduce_axis((0, p["in_features"]), name="k")
    acc = kind.accumulate
    C = te.compute((p["batch"], p["out_features"]),
                   lambda i, j: te.sum(in_type(X[i, k], acc) * in_type(W[j, k], acc), axis=k), name="C")
    return [X, W, gemm_output(C, dtype)]


def _batch_matmul_compute(p: Params, dtype: str):
    from tvm import te
    A = te.placeholder((p["B"], p["M"], p["K"]), dtype, name="A")
    B = te.placeholder((p["B"], p["K"], p["N"]), dtype, name="Bm")
    k = te.reduce_axis((0, p["K"]), name="k")
    C = te.compute((p["B"], p["M"], p["N"]), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B, C]


def _matmul_relax(p: Params, operands: list):
    from tvm import relax
    return relax.op.matmul(*operands)


def _dense_relax(p: Params, operands: list):
    from tvm import relax
    return relax.op.linear(*operands)


def _legalized_blocks(sch, p: Params) -> dict[str, str]:
    """TVM's legalized GEMM has this operator's loops; its last block is "C" by another name ("matmul")."""
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return {"C": names[-1]}


MATMUL = OpDef(
    name="matmul", doc="C[M,N] = A[M,K] @ B[K,N]", params=("M", "N", "K"), defaults={},
    input_shapes=lambda p: [(p["M"], p["K"]), (p["K"], p["N"])], output_shape=lambda p: (p["M"], p["N"]),
    compute=_matmul_compute, reference=lambda p, a: a[0] @ a[1], flops=lambda p: 2.0 * p["M"] * p["N"] * p["K"],
    example="M=1024,N=1024,K=1024",
    probe_shapes=({"M": 64, "N": 48, "K": 32}, {"M": 512, "N": 768, "K": 3072}),
    templates={"llvm": "search_spaces.matmul:MATMUL_CPU", "cuda": "search_spaces.cuda_gemm:MATMUL_CUDA"},
    ukernel_templates={"llvm": "search_spaces.matmul:MATMUL_UKERNEL_CPU"},
    row_split=RowSplit("M", (True, False)),
    relax_call=_matmul_relax, legalized_blocks=_legalized_blocks,
)

DENSE = OpDef(
    name="dense", doc="PyTorch linear without bias: Y[batch,out] = X[batch,in] @ W[out,in]^T",
    params=("batch", "in_features", "out_features"), defaults={},
    input_shapes=lambda p: [(p["batch"], p["in_features"]), (p["out_features"], p["in_features"])],
    output_shape=lambda p: (p["batch"], p["out_features"]),
    compute=_dense_compute, reference=lambda p, a: a[0] @ a[1].T,
    flops=lambda p: 2.0 * p["batch"] * p["in_features"] * p["out_features"],
    example="batch=128,in_features=768,out_features=3072",
    probe_shapes=({"batch": 16, "in_features": 64, "out_features": 96},
                  {"batch": 128, "in_features": 768, "out_features": 3072}),
    templates={"llvm": "search_spaces.matmul:DENSE_CPU", "cuda": "search_spaces.cuda_gemm:DENSE_CUDA"},
    row_split=RowSplit("batch", (True, False)),
    relax_call=_dense_relax, weights=(1,), legalized_blocks=_legalized_blocks,
)

BATCH_MATMUL = OpDef(
    name="batch_matmul", doc="C[B,M,N] = A[B,M,K] @ B[B,K,N]", params=("B", "M", "N", "K"), defaults={},
    input_shapes=lambda p: [(p["B"], p["M"], p["K"]), (p["B"], p["K"], p["N"])],
    output_shape=lambda p: (p["B"], p["M"], p["N"]),
    compute=_batch_matmul_compute, reference=lambda p, a: a[0] @ a[1],
    flops=lambda p: 2.0 * p["B"] * p["M"] * p["N"] * p["K"],
    example="B=12,M=128,N=128,K=64",
    probe_shapes=({"B": 2, "M": 32, "N": 48, "K": 16}, {"B": 12, "M": 128, "N": 128, "K": 64}),
    templates={"llvm": "search_spaces.matmul:BATCH_MATMUL_CPU", "cuda": "search_spaces.cuda_gemm:BATCH_MATMUL_CUDA"},
    row_split=RowSplit("B", (True, True), rows_per_unit=1),
    relax_call=_matmul_relax, legalized_blocks=_legalized_blocks,
)
