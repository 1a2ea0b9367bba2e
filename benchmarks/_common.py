"""Shared benchmark plumbing: a clean environment for fair BLAS timings, and RESULTS.md sections."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
_SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def reexec_clean(threads: int) -> None:
    """Re-run this script once without the variables that slow OpenBLAS, with the thread counts set.

    Must be called before numpy / torch / tvm are imported. Only this benchmark's process is
    affected; tests and CI keep the machine's environment.
    """
    want = {"TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    if any(v in os.environ for v in _SLOW_BLAS_VARS) or any(os.environ.get(k) != v for k, v in want.items()):
        env = {k: v for k, v in os.environ.items() if k not in _SLOW_BLAS_VARS}
        env.update(want)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def blas_info() -> str:
    """Which BLAS kernel numpy runs (threadpoolctl), e.g. 'openblas 0.3.30 SkylakeX, 2 threads'."""
    from threadpoolctl import threadpool_info

    rows = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')}, {i.get('num_threads')} threads"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(rows) or "no BLAS found"


def report(name: str, body: str, write: bool = True) -> None:
    """Print a benchmark's section and, unless `write` is False, store it in benchmarks/RESULTS.md."""
    if write:
        write_section(name, body)
    print(body)


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section `name` of benchmarks/RESULTS.md."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nEvery figure here was measured by the script named in its section.\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)
