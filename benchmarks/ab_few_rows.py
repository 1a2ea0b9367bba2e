"""A/B of the GEMM templates' few-row rules on the decoder block of `bench_dynamic_model.py`: untuned static builds
(the untuned config's rule below `search_spaces.matmul.FEW_ROWS` rows) or, with --dynamic, dynamic builds from that
benchmark's log (the derived 1- and 2-row kernels, `DERIVED_PANELS` weight panels per parallel job).

    python benchmarks/ab_few_rows.py --arms FEW_ROWS=0 FEW_ROWS=8 --tokens 1,2,4,7,9,16
    python benchmarks/ab_few_rows.py --dynamic --arms DERIVED_PANELS=2 DERIVED_PANELS=4 --tokens 1,2

An arm sets constants of `search_spaces.matmul` for its builds (FEW_ROWS=0: no few-row rule, the untuned config
as it was before the rule). With --dynamic, the static build tuned for each length (the benchmark's
`static-tN` logs) is timed beside the arms. Every output is checked against eager; the builds are timed in rounds
(`_baselines.best_of`: the least of 3 interleaved medians per round). Prints; the outcome goes to
docs/experiments.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baselines import best_of
from _common import reexec_clean
from bench_dynamic_model import block, export_dynamic, export_static, phase_inputs


def parse_arm(text: str) -> dict[str, int]:
    """"NAME=VALUE[,NAME=VALUE...]" -> {NAME: VALUE} (integer constants of search_spaces.matmul)."""
    return {name: int(value) for name, value in (part.split("=", 1) for part in text.split(","))}


def build_arm(constants: dict[str, int], program, logs: list[Path]):
    """build_model of `program` with `constants` set in search_spaces.matmul (restored after)."""
    import search_spaces.matmul as matmul
    from autotune.model import build_model

    saved = {name: getattr(matmul, name) for name in constants}
    try:
        for name, value in constants.items():
            setattr(matmul, name, value)
        return build_model(program, logs=logs)
    finally:
        for name, value in saved.items():
            setattr(matmul, name, value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", nargs="+", required=True, help="NAME=VALUE[,NAME=VALUE] per arm")
    ap.add_argument("--tokens", default="1,2,4,7", help="comma-separated prompt lengths")
    ap.add_argument("--dynamic", action="store_true", help="dynamic builds from --work's dynamic log")
    ap.add_argument("--work", default="benchmarks/work/dynamic_model", help="bench_dynamic_model.py's logs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    arms = {label: parse_arm(label) for label in args.arms}
    model = block()
    work = Path(args.work)
    dynamic = {label: build_arm(c, export_dynamic(model, "prefill"), [work / "dynamic" / "log.jsonl"])
               for label, c in arms.items()} if args.dynamic else {}
    for t in [int(v) for v in args.tokens.split(",")]:
        inputs = phase_inputs("prefill", t)
        builds = dict(dynamic) if args.dynamic else {
            label: build_arm(c, export_static(model, "prefill", t), []) for label, c in arms.items()}
        if args.dynamic:
            builds["static, tuned"] = build_arm({}, export_static(model, "prefill", t),
                                                [work / f"static-t{t}" / "log.jsonl"])
        with torch.no_grad():
            want = [o.numpy() for o in model(*inputs)]
        for label, built in builds.items():
            for got, ref in zip(built(*inputs), want):
                np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-3, atol=1e-3, err_msg=f"{label} t={t}")
        prepared = {label: (built, built.tvm_args(*inputs)) for label, built in builds.items()}
        for r in range(args.rounds):
            times = best_of([lambda b=b, a=a: b.run_tvm(a) for b, a in prepared.values()])
            first = times[0]
            print(f"t={t} round {r + 1}: " + ", ".join(f"{label} {s * 1e3:.3f} ms ({first / s:.2f}x)"
                                                      for label, s in zip(prepared, times)), flush=True)


if __name__ == "__main__":
    main()
