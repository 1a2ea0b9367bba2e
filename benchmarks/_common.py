"""Shared benchmark plumbing: a clean environment for fair BLAS timings, and each run's result stored as data.

A benchmark's result is one JSON file per run, `benchmarks/results/<name>/<UTC time>.json`: the command line,
when, the machine, the library versions, and the figures (the section's markdown and its tables parsed).
`benchmarks/RESULTS.md` is generated from the latest file of each name (`render_results.py`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
_SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_KERNEL_FLAGS = re.compile(r"^(fma|avx2|avx512\w*|\w*vnni\w*|\w*bf16\w*|amx\w*)$")  # CPU flags kernels care about
_VERSIONS = {"autotune": "autotune", "tvm": "apache-tvm", "numpy": "numpy", "torch": "torch", "xgboost": "xgboost"}


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
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    rows = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')}, {i.get('num_threads')} threads"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(rows) or "no BLAS found"


def report(name: str, body: str, write: bool = True) -> None:
    """Print a benchmark's section and, unless `write` is False, store it as this run's result."""
    if write:
        write_section(name, body)
    print(body)


def write_section(name: str, body: str) -> Path:
    """Store `body` as this run's result of benchmark `name` (a JSON file), then regenerate RESULTS.md."""
    if str(HERE) not in sys.path:  # render_results.py sits beside this file
        sys.path.insert(0, str(HERE))
    from render_results import render

    now = time.gmtime()
    name = re.sub(r"[^\w.-]+", "_", name.strip())  # a folder name: "cold_tuning resnet18" -> "cold_tuning_resnet18"
    result = {"name": name, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", now), "command": command_line(),
              "script": script_path(), "machine": machine(), "versions": versions(),
              "body": body.strip(), "tables": parse_tables(body)}
    path = RESULTS_DIR / name / time.strftime("%Y%m%dT%H%M%SZ.json", now)
    write_atomic(path, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    render()
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all: a temporary file beside it, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(text)
    os.replace(f.name, path)


def script_path() -> str:
    """This process's script, relative to the repository when inside it (benchmarks/bench_peak.py)."""
    script = Path(sys.argv[0]).resolve()
    return str(script.relative_to(HERE.parent)) if script.is_relative_to(HERE.parent) else str(script)


def command_line() -> str:
    """The command that ran this benchmark, as one would type it in the repository."""
    return shlex.join(["python", script_path(), *sys.argv[1:]])


def machine() -> dict:
    """CPU model, LLVM's name for it (what kernels compile for), core count and the CPU flags kernels use."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu": model.group(1).strip() if model else platform.processor() or platform.machine(),
            "llvm_mcpu": None, "cores": cores,
            "flags": sorted(f for f in (flags.group(1).split() if flags else []) if _KERNEL_FLAGS.match(f))}
    try:  # imports TVM (a few seconds, once): every benchmark but bench_peak has it loaded already
        from autotune.target import cpu_name, host_llvm_target

        info["llvm_mcpu"] = cpu_name(host_llvm_target())
    except Exception:  # noqa: BLE001 (no TVM here, or it failed: the CPU model and flags still say what ran)
        info["llvm_mcpu"] = None
    return info


def versions() -> dict:
    """Python and the installed libraries the figures depend on (package metadata: nothing is imported)."""
    found = {"python": platform.python_version()}
    for key, dist in _VERSIONS.items():
        try:
            found[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def parse_tables(markdown: str) -> list[dict]:
    """The markdown tables of a section, each {"columns": [...], "rows": [[...], ...]} (cells as text)."""
    tables, block = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            block.append(line.strip())
            continue
        if len(block) >= 2 and re.fullmatch(r"\|[\s:|-]*-[\s:|-]*\|?", block[1]):
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.removeprefix("|")
                      .removesuffix("|"))] for row in block]
            tables.append({"columns": cells[0], "rows": cells[2:]})
        block = []
    return tables
