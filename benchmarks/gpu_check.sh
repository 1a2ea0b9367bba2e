#!/usr/bin/env bash
# The prepared GPU check (issue: CUDA target). Three steps:
#
#   bash benchmarks/gpu_check.sh prepare   # here, with network to the package registry: fetch what the
#                                          # GPU machine lacks (TVM 0.27, tvm-ffi, xgboost) for its
#                                          # Python 3.12 into .gpu/ (git-ignored), TVM recompressed with xz
#   device run, carry [".gpu/tvm.tar.xz"]:  bash benchmarks/gpu_check.sh unpack
#   device run, carry [".gpu/wheels"], issued right after (the machine keeps /tmp while warm):
#                                           bash benchmarks/gpu_check.sh run
#
# Why two device calls: what travels is capped at 64 MiB a call. TVM's compiler library alone is
# 59.5 MiB after `xz -9e` (measured, without the cutlass headers); with the tvm-ffi and xgboost wheels
# (9 MB) it does not fit in one call. `unpack` leaves TVM in $SITE (/tmp, outside the repo: kept while the
# machine stays warm).
# The GPU image already has python3.12 with torch, numpy, cloudpickle, psutil, tqdm and
# cuda-bindings (NVRTC, which TVM uses to compile CUDA source when the kernel library loads).
# The TVM wheel (~100 MB) is over what travels (64 MiB), so prepare repacks it with xz.
#
# Lease plan (15 device minutes; the H200 run of 2026-12-04: start ~1 min, unpack 5 s, run 369 s with DEADLINE_S=400,
# which left no time for MetaSchedule on conv2d: each task's tuning ~100 s, MetaSchedule 64 trials 140-160 s).
# `run` at once after `unpack` (a machine stays warm only 30 s idle), device timeout 580; DEADLINE_S=520
# fitted both tasks and both MetaSchedule runs (about 530 s). `run` now first runs the GPU numeric tests
# (at most 150 s: the CUDA templates, models built for CUDA, dynamic kernels, a dynamic model and a CNN of a
# varying image size on CUDA, never yet run on a GPU), the whole-model comparison (`gpu_model.py`, at most 120 s) and the dynamic kernel against
# exact-size kernels (`gpu_dynamic.py`, at most 90 s), so the default DEADLINE_S is 200: MetaSchedule may not fit (its 64-trial figures are in the result gpu_h200,
# benchmarks/results/gpu_h200/). gpu_compare.py tunes four tasks (matmul and conv2d in float16 on tensor cores, never
# yet run on a GPU; matmul and conv2d in float32), TASK_BUDGET_S 60 each. Give the machine back after.
# Rehearse here first: `GPU_SITE=.gpu/site bash benchmarks/gpu_check.sh unpack`, then PYTHONPATH=.gpu/site
# with a Python 3.12 venv holding numpy, scipy, ml_dtypes,
# typing_extensions, cloudpickle, psutil and tqdm (as the GPU image has) runs everything up to the first
# GPU call, and `python benchmarks/gpu_compare.py --target llvm --trials 16 --task-budget-s 30
# --ms-trials 16` runs the whole comparison on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
# Outside the repo: between two device calls the machine keeps the compiled libraries of an ignored folder
# in the repo but not its Python files (seen: .gpu/site/tvm held only lib/ at the second call).
SITE=${GPU_SITE:-/tmp/autotune_gpu_site}
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
case "$mode" in
prepare)
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  rm -rf .gpu && mkdir -p .gpu/wheels .gpu/stage
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
      -d .gpu/wheels "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.14.post1" xgboost-cpu \
      pytest pluggy iniconfig packaging pygments
  for w in .gpu/wheels/apache_tvm-*.whl; do (cd .gpu/stage && unzip -q "../../$w") && rm "$w"; done
  rm -rf .gpu/stage/tvm/3rdparty  # CUTLASS headers: not used by autotune's templates
  find .gpu/stage -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
  tar -C .gpu/stage -cf - . | xz -9e -T2 > .gpu/tvm.tar.xz && rm -rf .gpu/stage
  ls -la .gpu/tvm.tar.xz; du -sh .gpu/wheels; echo "each must travel in its own device call (< 64 MiB with the repo)"
  ;;
unpack)
  rm -rf "$SITE" && mkdir -p "$SITE" && tar -C "$SITE" -xJf .gpu/tvm.tar.xz && du -sh "$SITE"
  ;;
run)
  test -f "$SITE/tvm/__init__.py" || { echo "run 'gpu_check.sh unpack' in a device call first" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .gpu/wheels/*.whl
  export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
  out=${OUT:-.gpu/out}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv || true
  command -v nvcc || echo "no nvcc on PATH"
  python3 -c "import tvm; print('tvm', tvm.__file__, 'cuda', tvm.cuda(0).exist, tvm.cuda(0).compute_version)"
  # tuning stops at TRIALS or TASK_BUDGET_S per task; MetaSchedule (MS_TRIALS) only while DEADLINE_S allows
  # numeric checks on the GPU (CUDA templates: random configs, double-buffered matmuls, float16 and bfloat16
  # GEMMs on tensor cores and widened conv2d; float32, float16 and bfloat16 models built for CUDA against PyTorch)
  # before timing
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_templates.py tests/test_model_cuda.py \
      tests/test_dynamic_cuda.py -k on_gpu 2>&1 \
      | tee "$out/gpu_tests.log" | tail -15 || echo "GPU numeric tests failed or timed out"
  # whole models built for CUDA (heuristic configs) against TVM's own CUDA pipeline and PyTorch eager
  timeout 120 python3 benchmarks/gpu_model.py --out "$out" 2>&1 | tee "$out/gpu_model.log" | tail -6 \
      || echo "gpu_model.py failed or timed out"
  # a dynamic dense kernel (uKernels composed by the cover in its host code) against exact-size kernels
  timeout 90 python3 benchmarks/gpu_dynamic.py --out "$out" 2>&1 | tee "$out/gpu_dynamic.log" | tail -12 \
      || echo "gpu_dynamic.py failed or timed out"
  python3 benchmarks/gpu_compare.py --trials "${TRIALS:-200}" --task-budget-s "${TASK_BUDGET_S:-60}" \
      --ms-trials "${MS_TRIALS:-64}" --deadline-s "${DEADLINE_S:-200}" --out "$out" 2>&1 | tee "$out/gpu_compare.log"
  python3 -m autotune.cli tune conv2d --shape N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1 --target cuda \
      --build-only --trials 8 --log "$out/cli_build_only.jsonl"
  ;;
*) echo "usage: $0 prepare|unpack|run" >&2; exit 2 ;;
esac
