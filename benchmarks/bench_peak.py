"""The machine's FP32 ceiling, measured: how close to it the tuned kernels (ours, torch, MetaSchedule) run.

    python benchmarks/bench_peak.py                 # after bench_search.py's kernel comparison, for the last table

A small C program (compiled here with the system's C compiler, `-O2 -march=native -fopenmp`) runs, on 1 and
on 2 threads at once:
- a chain of dependent register-to-register integer adds (one cycle each): the core clock under load;
- 12 independent chains of fused multiply-adds on AVX-512 and on AVX2 registers (enough in flight to hide
  the FMA latency on every x86 core we know): the FP32 FLOPs the cores can retire.
Stores as the result `fp32_peak` (or the one `--section` names): those rates, FLOPs per cycle per thread,
and, from the timings `bench_search.py --quality-trials N` saved in `--work`, every kernel of that comparison
as a share of the peak.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import write_section

SOURCE = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

#define CHAINS 12  /* independent accumulators, each its own register: enough to hide the FMA latency */
#define STEP(F) a0 = F(a0, m, c); a1 = F(a1, m, c); a2 = F(a2, m, c); a3 = F(a3, m, c); \
    a4 = F(a4, m, c); a5 = F(a5, m, c); a6 = F(a6, m, c); a7 = F(a7, m, c);         \
    a8 = F(a8, m, c); a9 = F(a9, m, c); a10 = F(a10, m, c); a11 = F(a11, m, c);
#define FMA_KERNEL(NAME, VEC, SET1, FMADD, ADD, LANES)                                  \
static double NAME(long n) {                                                         \
    VEC m = SET1(0.999999f), c = SET1(1e-7f);                                        \
    VEC a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5); \
    VEC a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11); \
    for (long i = 0; i < n; i++) { STEP(FMADD) }                                     \
    VEC s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));       \
    s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                     \
    float out[LANES]; memcpy(out, &s, sizeof out); return out[0];                    \
}

#ifdef __AVX512F__
FMA_KERNEL(fma512, __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16)
#endif
#ifdef __FMA__
FMA_KERNEL(fma256, __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 8)
#endif

/* 8 dependent adds per iteration: 8 cycles. Register to register: Golden Cove and later cores fold a chain of
   adds of an immediate at rename, several a cycle, which made this probe read 18 GHz. */
static double adds(long n) {
    long x = 0, one = 1;
    for (long i = 0; i < n; i++)
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0" : "+r"(x) : "r"(one));
    return (double)x;
}

/* Seconds for every thread to run kernel(n), all started together (best of 5). */
static double timed(double (*kernel)(long), long n, int threads) {
    double best = 1e30, sink = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = 0, t1 = 0;
        #pragma omp parallel num_threads(threads) reduction(+:sink)
        {
            #pragma omp barrier
            #pragma omp master
            t0 = now();
            sink += kernel(n);
            #pragma omp barrier
            #pragma omp master
            t1 = now();
        }
        if (t1 - t0 < best) best = t1 - t0;
    }
    if (sink == 12345.678) puts("");
    return best;
}

int main(int argc, char **argv) {
    int threads = atoi(argv[1]);
    long n = 100000000L;
    printf("{\"threads\": %d, \"ghz\": %.4f", threads, 8.0 * n / timed(adds, n, threads) / 1e9);
    n = 20000000L;
#ifdef __AVX512F__
    printf(", \"avx512\": %.2f", 2.0 * 16 * CHAINS * n * threads / timed(fma512, n, threads) / 1e9);
#endif
#ifdef __FMA__
    printf(", \"avx2\": %.2f", 2.0 * 8 * CHAINS * n * threads / timed(fma256, n, threads) / 1e9);
#endif
    printf("}\n");
    return 0;
}
"""


def measure(threads: list[int]) -> list[dict]:
    """Clock (GHz) and FMA GFLOPS per thread count, from the compiled probe."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise SystemExit("bench_peak: no C compiler (set CC)")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(SOURCE)
        subprocess.run([cc, "-O2", "-march=native", "-fopenmp", str(src), "-o", str(exe)], check=True)
        return [json.loads(subprocess.run([str(exe), str(t)], check=True, capture_output=True, text=True).stdout)
                for t in threads]


def kernel_shares(work: Path, peak: float) -> list[str]:
    """Each kernel of bench_search's kernel comparisons as a share of `peak` GFLOPS."""
    from autotune import make_task
    from bench_search import TASKS, quality_files

    rows = ["| task | budget (trials), seed | autotune | torch | MetaSchedule |", "|---|---|---|---|---|"]
    for label, (op, shape) in TASKS.items():
        task = make_task(op, shape)
        for (trials, _, seed), saved in sorted(quality_files(work / task.key).items()):
            times = json.loads(saved.read_text())["times"]
            torch_s = min(times["torch"], times.get("per_call", float("inf")))
            cells = [f"{task.flops / s / 1e9:.0f} ({task.flops / s / 1e9 / peak:.0%})"
                     for s in (times["ours"], torch_s, times.get("ms", float("nan")))]
            rows.append(f"| {label} | {trials}, {seed} | {' | '.join(cells)} |")
    return rows


def command_line(args) -> str:
    """The command that made a section: the script and the options given other than their defaults."""
    options = [f"--work {args.work}" if args.work != "benchmarks/work/search" else "",
               f"--section {args.section}" if args.section != "fp32_peak" else ""]
    return " ".join(["python benchmarks/bench_peak.py", *filter(None, options)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--work", default="benchmarks/work/search", help="bench_search.py's work folder")
    ap.add_argument("--section", default="fp32_peak", help="result name (benchmarks/results/NAME/)")
    args = ap.parse_args()
    results = measure(args.threads)
    rows = ["| threads | clock under load (GHz) | AVX-512 FMA (GFLOPS) | AVX2 FMA (GFLOPS) | FLOPs/cycle/thread |",
            "|---|---|---|---|---|"]
    for r in results:
        best = max(r.get("avx512", 0.0), r.get("avx2", 0.0))
        rows.append(f"| {r['threads']} | {r['ghz']:.2f} | {r.get('avx512', float('nan')):.0f} | "
                    f"{r.get('avx2', float('nan')):.0f} | {best / r['ghz'] / r['threads']:.1f} |")
    top = results[-1]
    peak = max(top.get("avx512", 0.0), top.get("avx2", 0.0))
    body = ["## FP32 ceiling of this machine (`benchmarks/bench_peak.py`)", "",
            f"Command: `{command_line(args)}`. A C probe (`-O2 -march=native -fopenmp`): a chain of "
            "dependent adds gives the clock under load; 12 independent FMA chains per thread give the FP32 rate "
            "the cores retire (best of 5 runs each, all threads started together).", "", *rows]
    work = Path(args.work)
    if work.is_dir():
        body += ["", f"Kernels of `bench_search.py`'s comparisons (GFLOPS, and share of the {top['threads']}-thread "
                 f"peak of {peak:.0f}), from the timings it saved:", "", *kernel_shares(work, peak)]
    text = "\n".join(body)
    write_section(args.section, text)
    print(text)


if __name__ == "__main__":
    main()
