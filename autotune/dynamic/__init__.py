"""Dynamic shapes (FTuner-style): tune a few uKernels once, cover any run-time size with them.

    spec = parse_dynamic("matmul", "M=1..4096,N=768,K=768")
    result = tune_dynamic(spec, trials=64, log="logs/mm_dyn.jsonl")   # a few uKernels, resumable
    kernel = load("logs/mm_dyn.jsonl", spec)                          # DynamicKernel
    c = kernel(a, b)                                                  # any M
"""

from .dispatch import DynamicKernel, UKernel, aligned_empty
from ..hardware import CpuModel, CudaModel, cpu_model, cuda_model, hardware_model
from .load import load
from .spec import DynamicSpec, parse_dynamic
from .tuning import DynamicTuneResult, tune_dynamic
from .ukernels import rank_ukernels

__all__ = ["CpuModel", "CudaModel", "DynamicKernel", "DynamicSpec", "DynamicTuneResult", "UKernel", "aligned_empty",
           "cpu_model", "cuda_model", "hardware_model", "load", "parse_dynamic", "rank_ukernels", "tune_dynamic"]
