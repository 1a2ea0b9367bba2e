"""On a CUDA machine: tune matmul 1024^3 and conv2d (64x56x56 3x3) in float16 (tensor cores) and in float32 for
the GPU, then time the best kernels next to torch (cuBLAS / cuDNN in the same type; for float32 TF32 off: the same
fp32 arithmetic, and TF32 on for reference) and, given --ms-trials, next to MetaSchedule's best at the same trial
budget, all on the same GPU in the same process.

    python3 benchmarks/gpu_compare.py --trials 200 --task-budget-s 120 --ms-trials 64 --out DIR

benchmarks/gpu_check.sh runs it inside a device lease. Each task's tuning stops at --trials or after
--task-budget-s, whichever comes first; the MetaSchedule arm runs only while --deadline-s allows.
Results go to DIR/gpu_results.json after every step, so a run cut short still reports what it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from itertools import accumulate
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TASKS = {  # label -> (op, shape, dtype)
    "matmul fp16 1024^3": ("matmul", "M=1024,N=1024,K=1024", "float16"),
    "matmul 1024^3": ("matmul", "M=1024,N=1024,K=1024", "float32"),
    "conv2d fp16 64x56x56 3x3": ("conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,padding=1", "float16"),
    "conv2d 64x56x56 3x3": ("conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,padding=1", "float32"),
}


class OutOfTime(Exception):
    pass


def check(task, got, arrays) -> None:
    """Raise unless `got` is the task's output on `arrays` (numpy reference, the task dtype's tolerance)."""
    from autotune.operators import check_output, reduction_size, reference_output

    ref = reference_output(task.opdef, task.shape, task.dtype, arrays)
    problem = check_output(got, ref, reduction_size(task.opdef, task.shape), task.dtype)
    if problem:
        raise AssertionError(f"{task}: {problem}")


def median(xs) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def torch_time(task, arrays, tf32: bool) -> float:
    """Median seconds per call of the torch op on the GPU (CUDA events), after checking its answer."""
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    cuda = torch.cuda.is_available()
    ts = [torch.from_numpy(a).to("cuda" if cuda else "cpu") for a in arrays]
    p = task.shape
    fn = (lambda: torch.matmul(*ts)) if task.op == "matmul" else \
        (lambda: F.conv2d(ts[0], ts[1], stride=p["stride"], padding=p["padding"]))
    if not tf32:
        check(task, fn().cpu().numpy(), arrays)
    if not cuda:  # --target llvm: a dry run of this script on a machine without a GPU
        from autotune.measure.timing import time_calls

        return median(time_calls(fn))
    for _ in range(10):
        fn()
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 20 / 1e3)
    return median(times)


def checked_time(kernel, arrays) -> float:
    """Median seconds per call of an autotune Kernel, after checking it against numpy."""
    check(kernel.task, kernel(*arrays), arrays)
    return median(kernel.time(*arrays, repeat=15, min_repeat_ms=100))


def best_within(first, task, trials: int):
    """Our best kernel among the first `trials` measured configs (`first`: the log's trials, in order), compiled."""
    from autotune.kernel import compile_config
    from autotune.database import TuningDatabase

    best = TuningDatabase(first[:trials]).best(task)
    return compile_config(task, best.input.config.index, best.input.template)


def with_knob_flipped(task, kernel, knob: str):
    """`kernel` (a config of the task's default template) with the boolean `knob` flipped, compiled; None when the
    space has no such knob or the flipped config breaks a GPU limit (e.g. double-buffered tiles too large)."""
    from autotune.gpu_limits import check_config
    from autotune.kernel import compile_config
    from autotune.templates import space_of

    if knob not in kernel.config.knobs:
        return None
    space = space_of(kernel.template, task)
    flipped = space.get(space.index_of_values({**kernel.config.knobs, knob: not kernel.config[knob]}))
    if check_config(task, kernel.template, flipped) is not None:
        return None
    return compile_config(task, flipped.index)


def choose_compile_mode(task) -> str:
    """Compile and check a valid config with TVM's default CUDA compiler (NVRTC), else with nvcc; the mode
    that works is left in TVM_CUDA_COMPILE_MODE for the build workers started later."""
    import os

    from autotune.gpu_limits import check_config
    from autotune.kernel import compile_config
    from autotune.operators import random_inputs
    from autotune.templates import default_template, space_of

    template = default_template(task)
    space = space_of(template, task)
    index = next(i for i in range(len(space)) if check_config(task, template, space.get(i)) is None)
    arrays = random_inputs(task.opdef, task.shape, "float32", seed=2)
    for mode in ("nvrtc", "nvcc"):
        os.environ["TVM_CUDA_COMPILE_MODE"] = mode
        try:
            check(task, compile_config(task, index)(*arrays), arrays)
            print(f"CUDA compile mode {mode}: config {index} runs and is correct", flush=True)
            return mode
        except Exception as err:  # noqa: BLE001 - report and try the other compiler
            print(f"CUDA compile mode {mode} failed: {type(err).__name__}: {str(err)[-800:]}", flush=True)
    sys.exit("neither NVRTC nor nvcc gives a working kernel")


def tune_for(task, log: Path, trials: int, budget_s: float, tuner: str):
    """Tune until `trials` or `budget_s`, whichever first; the log keeps every measurement."""
    from autotune import tune
    from autotune.measure import RunnerOptions

    t0 = time.time()

    def stop_when_late(result):
        print(f"  {len(result.records)} trials, {time.time() - t0:.0f} s", flush=True)
        if time.time() - t0 > budget_s:
            raise OutOfTime

    try:
        tune(task, trials=trials, tuner=tuner, log=log, batch_size=16, progress=stop_when_late,
             runner_options=RunnerOptions(min_repeat_ms=40))  # a GPU kernel: 40 ms is hundreds of calls
        return False, time.time() - t0
    except OutOfTime:
        return True, time.time() - t0


def failures(records) -> dict:
    """How many trials failed, by kind, with one message of each kind."""
    kinds = {}
    for r in records:
        if not r.result.ok:
            n, message = kinds.get(r.result.error.value, (0, r.result.message[:300]))
            kinds[r.result.error.value] = (n + 1, message)
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--task-budget-s", type=float, default=150)
    ap.add_argument("--ms-trials", type=int, default=0, help="MetaSchedule at this budget (0: skip)")
    ap.add_argument("--deadline-s", type=float, default=540, help="skip a step that would not end by then")
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--out", default="benchmarks/work/gpu")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--target", default="cuda", choices=["cuda", "llvm"], help="llvm: a dry run without a GPU")
    args = ap.parse_args()
    start = time.time()
    import tvm

    from autotune import make_task
    from autotune.operators import random_inputs
    from autotune.records import load_records, split_retimes
    from autotune.measure.timing import time_kernel

    cuda = args.target == "cuda"
    if cuda and not tvm.cuda(0).exist:
        sys.exit("no CUDA device here: run this on a GPU machine (benchmarks/gpu_check.sh), or --target llvm")
    arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "") if cuda else None
    dev = tvm.cuda(0) if cuda else tvm.cpu(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    mode = choose_compile_mode(make_task("matmul", "M=256,N=256,K=256", target="cuda", arch=arch)) if cuda else None

    def save(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        (out / "gpu_results.json").write_text(json.dumps(rows, indent=1))

    tuned = {}

    def tune_and_compare(label, op, shape, dtype):
        task = make_task(op, shape, dtype, target=args.target, arch=arch)
        log = out / f"{op}-{dtype}.jsonl"
        stopped, tune_s = tune_for(task, log, args.trials, args.task_budget_s, args.tuner)
        first, _ = split_retimes(r for r in load_records(log) if r.task.key == task.key)
        row = {"task": label, "arch": arch, "compile_mode": mode, "trials": len(first),
               "stopped_by_budget": stopped and len(first) < args.trials, "tune_s": round(tune_s, 1),
               "failures": failures(first)}
        if not any(r.result.ok for r in first):
            save({**row, "autotune_gflops": None})
            return
        arrays = random_inputs(task.opdef, task.shape, dtype, seed=1)
        kernel = best_within(first, task, len(first))
        gf = lambda s: task.flops / s / 1e9  # noqa: E731
        ours = checked_time(kernel, arrays)
        fp32 = torch_time(task, arrays, tf32=False)  # torch in the task's dtype (float32: TF32 off)
        tf32 = torch_time(task, arrays, tf32=True) if dtype == "float32" else fp32
        tuned[label] = (task, first, arrays)
        best_so_far = list(accumulate((r.result.mean_s if r.result.ok else math.inf for r in first), min))
        save({**row, "dtype": dtype, "autotune_gflops": gf(ours), "torch_gflops": gf(fp32),
              "torch_tf32_gflops": gf(tf32), "ratio_vs_torch": fp32 / ours, "config": kernel.config.to_dict(),
              "curve_gflops": [gf(s) for s in best_so_far[15::16] if math.isfinite(s)]})
        flipped = with_knob_flipped(task, kernel, "double_buffer")  # what the knob is worth on the best tiles
        if flipped is not None:
            save({"task": label, "knob": "double_buffer", "best_has": kernel.config["double_buffer"],
                  "best_gflops": gf(checked_time(kernel, arrays)), "flipped_gflops": gf(checked_time(flipped, arrays))})

    for label in args.tasks:
        try:
            tune_and_compare(label, *TASKS[label])
        except Exception as err:  # noqa: BLE001 - report it and go on with the next task
            traceback.print_exc()
            save({"task": label, "crashed": f"{type(err).__name__}: {str(err)[-800:]}"})
    if args.ms_trials:
        from _baselines import metaschedule_kernel

        for label, (task, first, arrays) in tuned.items():
            if task.dtype != "float32":  # the MetaSchedule arm builds fp32 kernels
                continue
            if time.time() - start > args.deadline_s - 150:
                print(f"skip MetaSchedule for {label}: too close to the deadline", flush=True)
                continue
            t0 = time.time()
            with tempfile.TemporaryDirectory() as work:
                got = metaschedule_kernel(task, args.ms_trials, work)
                if got is None:
                    save({"task": label, "metaschedule": "no valid kernel", "ms_s": round(time.time() - t0, 1)})
                    continue
                ms_exe, relay = got
                args_ms = [tvm.runtime.tensor(a, dev) for a in relay(arrays)]
                out_ms = tvm.runtime.empty(task.opdef.output_shape(task.shape), "float32", dev)
                ms_exe["main"](*args_ms, out_ms)
                check(task, out_ms.numpy(), arrays)
                ms = median(time_kernel(ms_exe.mod, dev, [*args_ms, out_ms], repeat=15, min_repeat_ms=100))
            kernel = best_within(first, task, args.ms_trials)
            ours = checked_time(kernel, arrays)
            gf = lambda s, t=task: t.flops / s / 1e9  # noqa: E731
            save({"task": label, "trials": args.ms_trials, "autotune_trials": min(args.ms_trials, len(first)),
                  "autotune_gflops": gf(ours), "metaschedule_gflops": gf(ms),
                  "ratio_vs_metaschedule": ms / ours, "ms_s": round(time.time() - t0, 1)})
    print("| task | trials | autotune GFLOPS | torch (same type) | torch tf32 | MetaSchedule | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "crashed" in r or r.get("autotune_gflops", 0) is None:
            print(f"| {r['task']} | {r.get('trials', '')} | {r.get('crashed') or r['failures']} | | | | |")
        elif "torch_gflops" in r:
            print(f"| {r['task']} | {r['trials']} | {r['autotune_gflops']:.0f} | {r['torch_gflops']:.0f} | "
                  f"{r['torch_tf32_gflops']:.0f} | | {r['ratio_vs_torch']:.2f}x torch {r['dtype']} |")
        elif "metaschedule_gflops" in r:
            print(f"| {r['task']} | {r['autotune_trials']} vs {r['trials']} | {r['autotune_gflops']:.0f} | | | "
                  f"{r['metaschedule_gflops']:.0f} | "
                  f"{r['ratio_vs_metaschedule']:.2f}x MetaSchedule |")


if __name__ == "__main__":
    main()
