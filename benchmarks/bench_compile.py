"""torch.compile(backend="autotune") against backend="inductor" and eager: coverage and speed.

1. Coverage: every module of benchmarks/compile_zoo.py (transformers architectures from tiny
   configs with random weights, torch.nn blocks), each in its own process with a timeout: does it
   run eagerly, does torch.export capture it whole, do the autotune and Inductor backends give
   outputs that match eager (two calls each), and how many of autotune's graphs ran on TVM.
2. Speed: the three models of benchmarks/models.py, compiled with the tuned logs of
   bench_model.py, against Inductor and eager, median times in one process.
Stores the tables as the result `torch_compile`.

    python benchmarks/bench_compile.py                                        # everything
    python benchmarks/bench_compile.py --limit 6 --speed-models resnet18 --no-write   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from _common import reexec_clean, report

RTOL, ATOL = 1e-3, 1e-4  # per output tensor: torch.allclose(out, eager, rtol=RTOL, atol=ATOL)


def leaves(out) -> list:
    """The tensors of a model output (ModelOutput, tuple, list, dict), in order."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        return leaves(out.to_tuple())
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in leaves(v)]
    return []


def compare(out, ref) -> tuple[bool, float]:
    """(every tensor matches, max abs error)."""
    import torch

    a, b = leaves(out), leaves(ref)
    if len(a) != len(b) or not a:
        return False, float("inf")
    err, ok = 0.0, True
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, float("inf")
        if y.numel():
            err = max(err, float((x.double() - y.double()).abs().max()))
            ok = ok and bool(torch.allclose(x.double(), y.double(), rtol=RTOL, atol=ATOL))
    return ok, err


def _emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:160] if text else ''}"


def run_one(name: str) -> None:
    """Worker: one module, one JSON line per step on stdout."""
    import logging

    import torch
    from compile_zoo import ZOO

    import autotune.torch_backend as tb

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    try:
        model, kwargs = ZOO[name]()
        with torch.no_grad():
            ref = model(**kwargs)
        _emit("eager", ok=True)
    except Exception as err:  # noqa: BLE001 - a module that does not run eagerly is reported, not fatal
        _emit("eager", ok=False, error=_short(err))
        return
    try:
        with torch.no_grad():
            torch.export.export(model, (), kwargs, strict=False)
        _emit("export", ok=True)
    except Exception as err:  # noqa: BLE001
        _emit("export", ok=False, error=_short(err))
    for backend in ("autotune", "inductor"):
        torch._dynamo.reset()
        tb.clear_cache()
        t0 = time.time()
        try:
            fn = torch.compile(model, backend=backend)
            with torch.no_grad(), warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                first = fn(**kwargs)
                seconds = time.time() - t0
                second = fn(**kwargs)
            (ok1, e1), (ok2, e2) = compare(first, ref), compare(second, ref)
            fields = {"ok": ok1 and ok2, "err": max(e1, e2), "seconds": round(seconds, 1)}
            if backend == "autotune":
                fields.update(graphs=tb.STATS.graphs, builds=tb.STATS.builds, hits=tb.STATS.hits,
                              fallbacks=tb.STATS.fallbacks, eager_graphs=tb.STATS.eager_graphs,
                              reasons=tb.STATS.reasons[:3],
                              kernels=sum(len(b.report.kernels) for b in tb.builds()),
                              warnings=sum(issubclass(w.category, tb.AutotuneFallbackWarning) for w in record))
            _emit(backend, **fields)
        except Exception as err:  # noqa: BLE001 - a backend that raises is a failure of that backend
            _emit(backend, ok=False, error=_short(err), seconds=round(time.time() - t0, 1))


def measure_module(name: str, timeout: float) -> dict:
    """Run the worker for one module in its own process; steps it did not reach are marked."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        stdout, tail = proc.stdout, f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired as exp:
        stdout = exp.stdout.decode() if isinstance(exp.stdout, bytes) else (exp.stdout or "")
        tail = f"timeout after {timeout:.0f} s"
    steps = {}
    for line in stdout.splitlines():
        if line.startswith('{"step"'):
            rec = json.loads(line)
            steps[rec.pop("step")] = rec
    for step in ("eager", "export", "autotune", "inductor"):
        if step not in steps and steps.get("eager", {}).get("ok", step == "eager"):
            steps[step] = {"ok": False, "error": tail}
    steps["wall_s"] = round(time.time() - t0, 1)
    return steps


def run_coverage(names: list[str], timeout: float, jobs: int, done_file: Path) -> dict[str, dict]:
    """measure_module for every name, `jobs` at a time; each result is appended to `done_file` as it
    arrives and a module already there is not run again (delete the file for a fresh run)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    done: dict[str, dict] = {}
    if done_file.exists():
        for line in done_file.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash: that module runs again
            done[rec.pop("module")] = rec
    todo = [n for n in names if n not in done]
    done_file.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, jobs)) as pool, done_file.open("a") as fh:
        futures = {pool.submit(measure_module, name, timeout): name for name in todo}
        for k, fut in enumerate(as_completed(futures)):
            name, r = futures[fut], fut.result()
            done[name] = r
            fh.write(json.dumps({"module": name, **r}) + "\n")
            fh.flush()
            print(f"[{k + 1}/{len(todo)}] {name}: " + ", ".join(
                f"{s}={'ok' if r.get(s, {}).get('ok') else 'no'}" for s in ("eager", "export", "autotune", "inductor"))
                + f" ({r['wall_s']} s)", file=sys.stderr, flush=True)
    return {n: done[n] for n in names}


def coverage_rows(results: dict[str, dict]) -> list[str]:
    def mark(step: dict) -> str:
        return "yes" if step.get("ok") else "**no**"

    rows = [("| module | eager | torch.export whole | autotune = eager | autotune graphs on TVM | autotune kernels "
            "| inductor = eager | autotune s / inductor s | note |"), "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not r["eager"].get("ok"):
            rows.append(f"| {name} | no | | | | | | | {r['eager'].get('error', '')} |")
            continue
        a, i = r["autotune"], r["inductor"]
        on_tvm = f"{a['graphs'] - a['eager_graphs']}/{a['graphs']}" if "graphs" in a else ""
        note = (a.get("reasons") or [a.get("error", "")])[0] if not a.get("ok") or a.get("fallbacks") else ""
        if not i.get("ok"):
            why = i.get("error") or f"mismatch, max err {i.get('err', 0):.1e}"
            note = (note + "; " if note else "") + f"inductor: {why}"
        rows.append(f"| {name} | yes | {mark(r['export'])} | {mark(a)} | {on_tvm} | {a.get('kernels', '')} | "
                    f"{mark(i)} | {a.get('seconds', '-')} / {i.get('seconds', '-')} | {note.replace('|', '/')[:200]} |")
    return rows


def coverage_totals(results: dict[str, dict]) -> list[str]:
    ran = [r for r in results.values() if r["eager"].get("ok")]
    n = len(ran)

    def count(pred) -> int:
        return sum(1 for r in ran if pred(r))

    at = count(lambda r: r["autotune"].get("ok"))
    ind = count(lambda r: r["inductor"].get("ok"))
    whole = count(lambda r: r["autotune"].get("ok") and r["autotune"].get("graphs")
                  and not r["autotune"]["eager_graphs"])
    none = count(lambda r: r["autotune"].get("graphs") and r["autotune"]["eager_graphs"] == r["autotune"]["graphs"])
    return [f"- modules: {len(results)}; run eagerly: {n}",
            f"- torch.export captures whole: {count(lambda r: r['export'].get('ok'))} of {n}",
            (f"- autotune backend matches eager: **{at} of {n}** ({100 * at / max(n, 1):.0f}%); every graph on "
            f"TVM: {whole}; some graphs on TVM: {n - whole - none}; no graph on TVM (all eager): {none}"),
            f"- inductor backend matches eager: **{ind} of {n}** ({100 * ind / max(n, 1):.0f}%)"]


def bench_speed(names: list[str], logs_dir: str, threads: int) -> list[str]:
    """Rows of the speed table: eager, autotune (tuned logs), inductor, in this process."""
    import torch
    from bench_model import median_ms
    from compile_zoo import ZOO
    from models import MODELS

    import autotune.torch_backend as tb

    torch.set_num_threads(threads)
    rows = []
    for name in names:
        if name in MODELS:
            model, inputs = MODELS[name]()
            call = (lambda m, x: m(*x))
        else:  # a module of the zoo (keyword inputs)
            model, inputs = ZOO[name]()
            call = (lambda m, x: m(**x))
        log = os.path.join(logs_dir, f"{name}.jsonl")
        options = {"logs": [log]} if os.path.exists(log) else None
        with torch.no_grad():
            ref = call(model, inputs)
            eager_ms = median_ms(lambda m=model, x=inputs: call(m, x))
            res = {}
            for backend in ("autotune", "inductor"):
                torch._dynamo.reset()
                tb.clear_cache()
                fn = torch.compile(model, backend=backend, options=options if backend == "autotune" else None)
                t0 = time.time()
                out = call(fn, inputs)
                compile_s = time.time() - t0
                ok, err = compare(out, ref)
                res[backend] = (median_ms(lambda f=fn, x=inputs: call(f, x)), compile_s, err, ok)
                if backend == "autotune":
                    kernels = [k for b in tb.builds() for k in b.report.kernels]
                    tuned = f"{sum(k.tuned for k in kernels)}/{len(kernels)}"
                    on_tvm = f"{tb.STATS.graphs - tb.STATS.eager_graphs}/{tb.STATS.graphs}"
        (a_ms, a_s, a_err, a_ok), (i_ms, i_s, i_err, i_ok) = res["autotune"], res["inductor"]
        errs = " / ".join(f"{e:.1e}{'' if ok else ' (**mismatch**)'}" for e, ok in ((a_err, a_ok), (i_err, i_ok)))
        rows.append(f"| {name} | {eager_ms:.2f} | {a_ms:.2f} | {i_ms:.2f} | {eager_ms / a_ms:.2f}x | "
                    f"{i_ms / a_ms:.2f}x | {tuned} | {on_tvm} | {a_s:.0f} / {i_s:.0f} | {errs} |")
        print(rows[-1], file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", help=argparse.SUPPRESS)  # worker mode: one module of the zoo
    ap.add_argument("--limit", type=int, default=0, help="only the first N modules of the zoo")
    ap.add_argument("--modules", nargs="*", help="these modules of the zoo only")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per module (both backends)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--speed-models", nargs="*", default=["resnet18", "transformer_layer", "mobilenet_blocks"],
                    help="models of benchmarks/models.py or modules of the zoo (compile_zoo.py) to time")
    ap.add_argument("--logs", default="benchmarks/work/models", help="folder of <model>.jsonl (bench_model.py)")
    ap.add_argument("--no-coverage", action="store_true")
    ap.add_argument("--jobs", type=int, default=1,
                    help="modules checked at once (coverage checks outputs, not speed; its compile seconds grow)")
    ap.add_argument("--work", default="benchmarks/work/compile", help="coverage.jsonl: results kept per module")
    ap.add_argument("--no-write", action="store_true", help="print the tables; store no result")
    args = ap.parse_args()
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # cold compiles for Inductor too (autotune keeps none)
    reexec_clean(args.threads)
    if args.one:
        run_one(args.one)
        return
    warnings.simplefilter("ignore")
    import torch
    import tvm
    from compile_zoo import ZOO

    from autotune.target import cpu_name, host_llvm_target

    names = args.modules or list(ZOO)
    names = names[: args.limit] if args.limit else names
    results: dict[str, dict] = {}
    t0 = time.time()
    if not args.no_coverage:
        results = run_coverage(names, args.timeout, args.jobs, Path(args.work) / "coverage.jsonl")
    coverage_s = time.time() - t0
    speed = bench_speed(args.speed_models, args.logs, args.threads) if args.speed_models else []
    cpu = cpu_name(host_llvm_target(args.threads))
    import transformers

    body = ["## torch.compile backend (`benchmarks/bench_compile.py`)", "",
            (f"CPU {cpu}, {args.threads} threads (TVM_NUM_THREADS, OMP, torch.set_num_threads); "
             f"torch {torch.__version__}, TVM {tvm.__version__}, transformers {transformers.__version__}; "
             "everything under `torch.no_grad()`, "
             "modules in eval mode. Command: `python benchmarks/bench_compile.py"
             + (f" --jobs {args.jobs}" if args.jobs > 1 else "") + "` "
             f"(this invocation's coverage part took {coverage_s / 60:.0f} min; modules found in "
             f"{args.work}/coverage.jsonl are not run again)."), ""]
    if results:
        body += ["### Coverage", "",
                 (f"Each module in its own process ({args.timeout:.0f} s limit), called twice per backend with the "
                  f"same inputs; \"= eager\" means every output tensor of both calls satisfies "
                  f"`torch.allclose(out, eager, rtol={RTOL}, atol={ATOL})`. \"graphs on TVM\": graphs Dynamo handed "
                  "to autotune that ran on a TVM build (the rest ran eagerly, with one warning each, by design: "
                  "a fallback keeps the outputs equal to eager, so \"= eager\" alone does not measure coverage). "
                  "\"kernels\": autotune template kernels (conv2d/matmul/...) in those builds. Times: first call "
                  "(compile + run) in seconds, Inductor's caches disabled."), "",
                 *coverage_totals(results), "", *coverage_rows(results), ""]
    if speed:
        body += ["### Speed", "",
                 (f"Models of benchmarks/models.py (batch 1); autotune with the tuned logs of "
                  f"`benchmarks/bench_model.py` ({args.logs}); median wall time per call after two warm-up calls, "
                  "same process, eager / autotune / inductor in turn."), "",
                 ("| model | eager ms | autotune ms | inductor ms | autotune speed-up vs eager | vs inductor "
                 "| tasks tuned | graphs on TVM | compile s (autotune / inductor) "
                  "| max abs err (autotune / inductor) |"),
                 "|---|---|---|---|---|---|---|---|---|---|", *speed, ""]
    text = "\n".join(body)
    report("torch_compile", text, write=not args.no_write)


if __name__ == "__main__":
    main()
