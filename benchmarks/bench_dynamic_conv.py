"""A CNN with a dynamic image height and width: one dynamic build (each convolution as im2col and a dynamic dense)
against static builds tuned per image size, PyTorch eager, Inductor (`dynamic=True`) and autotune's torch.compile
backend (`dynamic=True`, on the dynamic build's log).

The CNN is four convolutions of a ResNet stem's sizes (3x3 of stride 2 to 32 channels, 3x3 to 64, 3x3 of stride 2,
1x1 to 128; ReLUs between), random weights, batch 1. Dynamic: one export with the height and width each a
`torch.export.Dim` over 32..256, `tune_model` on it (the uKernels of its four dense sites), one `build_model`.
Static: an export, `tune_model` and a build per image size, each with its own log (nothing transfers between
sizes). Both start from the shipped knowledge, as a user's run does. Every output is checked against eager; the
contenders are timed interleaved (the least of 3 medians of 5 samples) in one process. Tuning logs and wall times
live under --work (re-running resumes).

`--model mobile`: a MobileNetV2 stem instead (3x3 of stride 2 to 32 channels, a depthwise 3x3, 1x1 to 16, 1x1 to
96, a depthwise 3x3 of stride 2, 1x1 to 24; ReLU6 between): its depthwise convolutions on the hand-written kernel of
symbolic sizes (`dynamic.symbolic_ops.grouped_conv_func`) in the dynamic build, on tuned tasks in the static ones.
`--model resnext`: a ResNeXt block after a stem (3x3 of stride 2 to 64 channels, 1x1 to 128, a grouped 3x3 of 32
groups of 4 channels, 1x1 to 128; ReLUs between): its grouped convolution on that kernel too.

    python benchmarks/bench_dynamic_conv.py               # tune, build, time, check (about 20 min)
    python benchmarks/bench_dynamic_conv.py --no-tune     # build and time from the logs
    python benchmarks/bench_dynamic_conv.py --model mobile
    python benchmarks/bench_dynamic_conv.py --model resnext
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
from _common import reexec_clean, report
from bench_dynamic import Times, _geo
from bench_dynamic_model import _trials, backend_line, dynamic_run, tune_runs

SIZES = [(32, 32), (47, 61), (64, 64), (97, 97), (128, 96), (160, 160), (211, 157), (224, 224)]  # 47, 61, 97, 211,
# 157 prime
RANGE = (32, 256)


def cnn():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
                         nn.ReLU(), nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 1)).eval()


def mobile():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU6(),
                         nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU6(), nn.Conv2d(32, 16, 1),
                         nn.Conv2d(16, 96, 1), nn.ReLU6(), nn.Conv2d(96, 96, 3, stride=2, padding=1, groups=96),
                         nn.ReLU6(), nn.Conv2d(96, 24, 1)).eval()


def resnext():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 1), nn.ReLU(),
                         nn.Conv2d(128, 128, 3, padding=1, groups=32), nn.ReLU(), nn.Conv2d(128, 128, 1)).eval()


# name -> (the model, its title, what it is, how the dynamic build runs it)
MODELS = {
    "resnet": (cnn, "CNN", "Four convolutions of a ResNet stem's sizes",
               "each convolution as im2col and a dynamic dense over its output pixels"),
    "mobile": (mobile, "MobileNetV2 stem", "A MobileNetV2 stem (six convolutions, two of them depthwise)",
               "each convolution of one group as im2col and a dynamic dense over its output pixels, the depthwise "
               "ones on the hand-written kernel of symbolic sizes"),
    "resnext": (resnext, "ResNeXt block", "A ResNeXt block after a stem (four convolutions, one of 32 groups)",
                "each convolution of one group as im2col and a dynamic dense over its output pixels, the grouped one "
                "on the hand-written kernel of symbolic sizes")}


def image(size: tuple[int, int], seed: int = 0):
    import torch

    return torch.randn(1, 3, *size, generator=torch.Generator().manual_seed(seed))


def export(model, size: tuple[int, int] | None):
    """The dynamic export (size None) or a static one of that image size."""
    import torch

    if size is not None:
        return torch.export.export(model, (image(size),))
    h, w = (torch.export.Dim(n, min=RANGE[0], max=RANGE[1]) for n in "hw")
    return torch.export.export(model, (image((64, 48)),), dynamic_shapes={"input": {2: h, 3: w}})


def _name(size: tuple[int, int]) -> str:
    return f"static-{size[0]}x{size[1]}"


def tune(args, model, times: Times) -> None:
    static = [(_name(s), export(model, s), args.static_trials, 8) for s in SIZES]
    tune_runs(args, [dynamic_run(export(model, None), args.dynamic_trials), *static], times)


def compare(args, model, times: Times) -> str:
    import numpy as np
    import torch

    from autotune.model import build_model

    dyn_log = Path(args.work) / "dynamic" / "log.jsonl"
    dynamic = build_model(export(model, None), logs=[dyn_log])
    inductor = torch.compile(model, dynamic=True)
    backend = torch.compile(model, backend="autotune", dynamic=True, options={"logs": [str(dyn_log)]})
    rows, vs_static, vs_eager, vs_inductor, backend_vs_eager = [], [], [], [], []
    for size in SIZES:
        static = build_model(export(model, size), logs=[Path(args.work) / _name(size) / "log.jsonl"])
        x = image(size, seed=size[0])
        with torch.no_grad():
            want = model(x).numpy()
            for name, got in (("dynamic", dynamic(x)), ("static", static(x)), ("inductor", inductor(x).numpy()),
                              ("backend", backend(x).numpy())):
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3, err_msg=f"{name} {size}")
            dargs, sargs = dynamic.tvm_args(x), static.tvm_args(x)
            t_dyn, t_static, t_eager, t_ind, t_back = best_of([
                lambda: dynamic.run_tvm(dargs), lambda: static.run_tvm(sargs), lambda: model(x), lambda: inductor(x),
                lambda: backend(x)])
        vs_static.append(t_static / t_dyn)
        vs_eager.append(t_eager / t_dyn)
        vs_inductor.append(t_ind / t_dyn)
        backend_vs_eager.append(t_eager / t_back)
        rows.append(f"| {size[0]}x{size[1]} | {t_dyn * 1e3:.3f} | {t_static * 1e3:.3f} | {t_eager * 1e3:.3f} | "
                    f"{t_ind * 1e3:.3f} | {t_back * 1e3:.3f} | {vs_static[-1]:.2f}x | {vs_eager[-1]:.2f}x | "
                    f"{vs_inductor[-1]:.2f}x |")
        print(rows[-1], flush=True)
    static_s = sum(times.get(_name(s)) for s in SIZES)
    static_trials = sum(_trials(Path(args.work) / _name(s) / "log.jsonl") for s in SIZES)
    dyn_s, dyn_trials = times.get("dynamic"), _trials(dyn_log)
    low = SIZES[vs_static.index(min(vs_static))]
    summary = [
        f"- Dynamic vs static tuned per image size: geometric mean **{_geo(vs_static):.2f}x**, lowest "
        f"{min(vs_static):.2f}x ({low[0]}x{low[1]}).",
        f"- Tuning: dynamic {dyn_s:.0f} s ({dyn_trials} trials) vs static {static_s:.0f} s ({static_trials} trials, "
        f"{len(SIZES)} sizes): **1/{static_s / max(dyn_s, 1e-9):.0f}** of the time.",
        f"- Dynamic vs eager: geometric mean **{_geo(vs_eager):.2f}x**; vs Inductor (dynamic=True) "
        f"**{_geo(vs_inductor):.2f}x**.",
        backend_line(backend_vs_eager, f"{len(SIZES)} sizes"),
        "", dynamic.report.summary().replace("\n", "\n    "),
    ]
    return "\n".join(summary + ["", "| image | dynamic ms | static ms | eager ms | Inductor ms | backend ms | "
                                    "dynamic vs static | vs eager | vs Inductor |",
                                "|---|---|---|---|---|---|---|---|---|", *rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--static-trials", type=int, default=64, help="tune-model trials of each image size's build")
    ap.add_argument("--dynamic-trials", type=int, default=48, help="tune-model trials of the dynamic build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet")
    ap.add_argument("--work", help="logs and tuning times (default: benchmarks/work/dynamic_conv, _mobile or _resnext)")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print tune-model's progress")
    ap.add_argument("--no-write", action="store_true", help="print the table; store no result")
    args = ap.parse_args()
    reexec_clean(args.threads)
    suffix = "" if args.model == "resnet" else f"_{args.model}"
    args.work = args.work or f"benchmarks/work/dynamic_conv{suffix}"
    warnings.simplefilter("ignore")
    import torch
    import tvm

    from autotune.target import cpu_name, host_llvm_target

    torch.set_num_threads(args.threads)
    make, title, what, how = MODELS[args.model]
    model = make()
    times = Times(Path(args.work) / "tuning_times.json")
    if not args.no_tune:
        tune(args, model, times)
    body = compare(args, model, times)
    text = "\n".join([
        f"## A {title} with a dynamic image size: one dynamic build "
        "vs static builds per size "
        "(`benchmarks/bench_dynamic_conv.py`)", "",
        (f"CPU {cpu_name(host_llvm_target(args.threads))}, {args.threads} threads (TVM and torch); TVM "
         f"{tvm.__version__}, torch {torch.__version__}. {what}, batch 1, "
         f"float32. Dynamic: one export with height and width in {RANGE[0]}..{RANGE[1]}, `tune_model` "
         f"{args.dynamic_trials} trials in rounds of an equal share per task, one build ({how}). Static: an "
         f"export, `tune_model` {args.static_trials} trials "
         "(rounds of 8) and a build per size. Inductor: `torch.compile(dynamic=True)`. Backend: "
         "`torch.compile(backend=\"autotune\", dynamic=True)` with the dynamic build's log. Times: the least of 3 "
         "interleaved medians of 5 samples; every output checked against eager."),
        "", body])
    report(f"dynamic_conv{suffix}", text, write=not args.no_write)


if __name__ == "__main__":
    main()
