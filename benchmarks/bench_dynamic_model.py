"""A GPT-2-style decoder block with a dynamic prompt length (prefill) or cache length (decode): one dynamic build
against static builds tuned per length, PyTorch eager, Inductor (`dynamic=True`) and autotune's torch.compile
backend (`dynamic=True`, on the dynamic build's log).

The model is `models.GPTBlock` (d_model 768, 12 heads, GPT-2's layout; random weights, no download) or, with
`--model gpt2`, transformers' `GPT2Model` built from a `GPT2Config` (`--layers`, default 2; its default attention;
a `DynamicCache` of the past keys and values; random weights, no download), exported once with the prompt (or
cache) length a `torch.export.Dim` over 1..1024 and once per length with static shapes.
Dynamic: `tune_model` on the dynamic program (prefill: each linear layer's tallest uKernel, weighted by the layer's
time over the range, the other heights derived from it by the build; decode: its linear layers, of one row, as
ordinary tasks), then one `build_model`.
Static: `tune_model` of each length on its own (its own log folder, so nothing transfers between lengths), then
a build per length. Both start from the shipped knowledge, as a user's
run does. Every output is checked against eager; the five contenders are timed interleaved (the least of 3
medians of 5 samples), in one process. Tuning logs and wall times live under --work (re-running resumes).

    python benchmarks/bench_dynamic_model.py                         # tune, build, time, check (about 25 min)
    python benchmarks/bench_dynamic_model.py --no-tune               # build and time from the logs
    python benchmarks/bench_dynamic_model.py --phase decode          # one token against a cache of 1..1024
    python benchmarks/bench_dynamic_model.py --model gpt2            # transformers' GPT-2 (2 layers)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baselines import best_of
from _common import reexec_clean, report
from bench_dynamic import Times, _count, _geo


def _trials(log: Path) -> int:
    """Configs measured in a log (its re-timings of the same configs not counted again)."""
    from autotune import load_records

    return len({(r.task.key, r.input.config.index) for r in load_records(log)}) if log.exists() else 0

LENGTHS = [1, 2, 3, 7, 16, 31, 64, 97, 128, 211, 256, 509, 1024]  # primes among them: 2, 3, 7, 31, 97, 211, 509
RANGE = (1, 1024)
HEADS, HEAD_DIM = 12, 64


def block():
    import torch
    from models import GPTBlock

    torch.manual_seed(0)
    return GPTBlock(HEADS * HEAD_DIM, HEADS).eval()


def gpt2(layers: int):
    """transformers' GPT2Model from a GPT2Config (d_model 768, 12 heads, `layers` layers, random weights) called as
    the block is: forward(x, past_k, past_v), x the new tokens' embeddings [1, t, 768], the caches [layers, 1,
    heads, past, head_dim] (a DynamicCache inside); returns its last hidden state and the updated caches."""
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2Model

    config = GPT2Config(n_layer=layers, n_embd=HEADS * HEAD_DIM, n_head=HEADS, n_positions=2 * RANGE[1] + 1,
                        vocab_size=256, bos_token_id=0, eos_token_id=0, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = GPT2Model(config)

        def forward(self, x, past_k, past_v):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past_k[i], past_v[i], i)
            past = past_k.shape[3]
            positions = torch.arange(past, past + x.shape[1]).unsqueeze(0)
            out = self.gpt2(inputs_embeds=x, past_key_values=cache, position_ids=positions, use_cache=True)
            kv = out.past_key_values.layers
            return (out.last_hidden_state, torch.stack([c.keys for c in kv]),
                    torch.stack([c.values for c in kv]))

    torch.manual_seed(0)
    return Decoder().eval()


def phase_inputs(phase: str, length: int, seed: int = 0, layers: int = 0):
    """prefill: `length` new tokens, no cache; decode: one new token against a cache of `length` tokens. The
    caches: [1, heads, t, head_dim] (the block's; `layers` 0), else [layers, 1, heads, t, head_dim] (`gpt2`)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    lead = (layers,) if layers else ()
    if phase == "prefill":
        empty = torch.zeros(*lead, 1, HEADS, 0, HEAD_DIM)
        return torch.randn(1, length, HEADS * HEAD_DIM, generator=gen), empty, empty.clone()
    return (torch.randn(1, 1, HEADS * HEAD_DIM, generator=gen),
            *(torch.randn(*lead, 1, HEADS, length, HEAD_DIM, generator=gen) for _ in range(2)))


def export_dynamic(model, phase: str, layers: int = 0):
    import torch

    t = torch.export.Dim("t", min=RANGE[0], max=RANGE[1])
    past = 3 if layers else 2
    shapes = ({"x": {1: t}, "past_k": None, "past_v": None} if phase == "prefill" else
              {"x": None, "past_k": {past: t}, "past_v": {past: t}})
    return torch.export.export(model, phase_inputs(phase, 16, layers=layers), dynamic_shapes=shapes)


def export_static(model, phase: str, length: int, layers: int = 0):
    import torch

    return torch.export.export(model, phase_inputs(phase, length, layers=layers))


def tune(args, model, times: Times) -> None:
    dynamic = export_dynamic(model, args.phase, args.layers)
    static = [(f"static-t{t}", export_static(model, args.phase, t, args.layers), args.static_trials, 16)
              for t in LENGTHS]
    tune_runs(args, [dynamic_run(dynamic, args.dynamic_trials), *static], times)


def dynamic_run(program, trials: int) -> tuple:
    """The dynamic program's run: its uKernel tasks share a small budget, in rounds of an equal share each, so
    that every one is tuned."""
    from autotune.model import extract_tasks

    return "dynamic", program, trials, max(1, trials // len(extract_tasks(program)))


def tune_runs(args, runs, times: Times) -> None:
    """`tune_model` of each (name, program, trials, round trials) into --work/NAME/log.jsonl, its wall seconds
    added to `times` where it measured anything (a re-run resumes)."""
    from autotune.model import tune_model

    quiet = (lambda msg: None) if not args.verbose else None
    for name, program, trials, rounds in runs:
        log = Path(args.work) / name / "log.jsonl"
        before, t0 = _count(log), time.perf_counter()
        tune_model(program, trials=trials, log=log, round_trials=rounds, progress=quiet)
        if _count(log) > before:
            times.add(name, time.perf_counter() - t0)
        print(f"{name}: {_trials(log)} trials, {times.get(name):.0f} s of tuning", flush=True)


def backend_line(vs_eager: list[float], what: str) -> str:
    """The summary line of autotune's torch.compile backend: its speed against eager and its builds."""
    from autotune.torch_backend import STATS

    return (f"- autotune's torch.compile backend (`dynamic=True`, the same log): geometric mean "
            f"**{_geo(vs_eager):.2f}x** eager, {STATS.builds} builds for the {what} ({STATS.dynamic} of Dynamo's "
            f"symbolic sizes, serving every size it covers; {STATS.fallbacks} eager fallbacks)"
            + "".join(f"; {why}" for why in dict.fromkeys(STATS.reasons)) + ".")


def compare(args, model, times: Times) -> str:
    import numpy as np
    import torch

    from autotune.model import build_model

    dyn_log = Path(args.work) / "dynamic" / "log.jsonl"
    dynamic = build_model(export_dynamic(model, args.phase, args.layers), logs=[dyn_log])
    inductor = torch.compile(model, dynamic=True)
    backend = torch.compile(model, backend="autotune", dynamic=True, options={"logs": [str(dyn_log)]})
    rows, vs_static, vs_eager, vs_inductor, backend_vs_eager = [], [], [], [], []
    static_s = sum(times.get(f"static-t{t}") for t in LENGTHS)
    static_trials = sum(_trials(Path(args.work) / f"static-t{t}" / "log.jsonl") for t in LENGTHS)
    for t in LENGTHS:
        static = build_model(export_static(model, args.phase, t, args.layers),
                             logs=[Path(args.work) / f"static-t{t}" / "log.jsonl"])
        inputs = phase_inputs(args.phase, t, seed=t, layers=args.layers)
        with torch.no_grad():
            want = [o.numpy() for o in model(*inputs)]
            for name, got in (("dynamic", dynamic(*inputs)), ("static", static(*inputs)),
                              ("inductor", [o.numpy() for o in inductor(*inputs)]),
                              ("backend", [o.numpy() for o in backend(*inputs)])):
                for g, w in zip(got, want):
                    np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-3, err_msg=f"{name} t={t}")
            dargs, sargs = dynamic.tvm_args(*inputs), static.tvm_args(*inputs)
            t_dyn, t_static, t_eager, t_ind, t_back = best_of([
                lambda: dynamic.run_tvm(dargs), lambda: static.run_tvm(sargs), lambda: model(*inputs),
                lambda: inductor(*inputs), lambda: backend(*inputs)])
        vs_static.append(t_static / t_dyn)
        vs_eager.append(t_eager / t_dyn)
        vs_inductor.append(t_ind / t_dyn)
        backend_vs_eager.append(t_eager / t_back)
        rows.append(f"| {t} | {t_dyn * 1e3:.3f} | {t_static * 1e3:.3f} | {t_eager * 1e3:.3f} | {t_ind * 1e3:.3f} | "
                    f"{t_back * 1e3:.3f} | {vs_static[-1]:.2f}x | {vs_eager[-1]:.2f}x | {vs_inductor[-1]:.2f}x |")
        print(rows[-1], flush=True)
    dyn_s, dyn_trials = times.get("dynamic"), _trials(dyn_log)
    summary = [
        f"- Dynamic vs static tuned per length: geometric mean **{_geo(vs_static):.2f}x**, lowest "
        f"{min(vs_static):.2f}x (t={LENGTHS[vs_static.index(min(vs_static))]}) (goal: >= 0.9x at every length).",
        f"- Tuning: dynamic {dyn_s:.0f} s ({dyn_trials} trials) vs static {static_s:.0f} s ({static_trials} trials, "
        f"{len(LENGTHS)} lengths): **1/{static_s / max(dyn_s, 1e-9):.0f}** of the time (goal: <= 1/20).",
        f"- Dynamic vs eager: geometric mean **{_geo(vs_eager):.2f}x** (goal >= 1.2x); vs Inductor (dynamic=True) "
        f"**{_geo(vs_inductor):.2f}x** (goal >= 1.0x).",
        backend_line(backend_vs_eager, f"{len(LENGTHS)} lengths"),
        "", dynamic.report.summary().replace("\n", "\n    "),
    ]
    length = "prompt length" if args.phase == "prefill" else "cache length"
    return "\n".join(summary + ["", f"| {length} | dynamic ms | static ms | eager ms | Inductor ms | backend ms | "
                                    "dynamic vs static | vs eager | vs Inductor |",
                                "|---|---|---|---|---|---|---|---|---|", *rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--static-trials", type=int, default=64, help="tune-model trials of each length's static build")
    ap.add_argument("--dynamic-trials", type=int, default=56, help="tune-model trials of the dynamic build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--phase", choices=["prefill", "decode"], default="prefill",
                    help="prefill: a prompt of 1..1024 tokens; decode: one token against a cache of 1..1024")
    ap.add_argument("--model", choices=["block", "gpt2"], default="block",
                    help="block: benchmarks/models.py's GPT-2-style block; gpt2: transformers' GPT2Model from a config")
    ap.add_argument("--layers", type=int, default=2, help="the gpt2 model's layers")
    ap.add_argument("--work", help="logs and tuning times (default: benchmarks/work/dynamic_model[_gpt2][_decode])")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print tune-model's progress")
    ap.add_argument("--no-write", action="store_true", help="print the table; store no result")
    ap.add_argument("--lengths", help="comma-separated prompt lengths instead of the 13 (a partial run: not written)")
    args = ap.parse_args()
    if args.lengths:
        LENGTHS[:] = [int(v) for v in args.lengths.split(",")]
        args.no_write = True
    reexec_clean(args.threads)
    if args.model == "block":
        args.layers = 0
    suffix = ("" if args.model == "block" else f"_{args.model}") + ("" if args.phase == "prefill" else "_decode")
    args.work = args.work or f"benchmarks/work/dynamic_model{suffix}"
    warnings.simplefilter("ignore")
    import torch
    import tvm

    from autotune.target import cpu_name, host_llvm_target

    torch.set_num_threads(args.threads)
    model = block() if args.model == "block" else gpt2(args.layers)
    times = Times(Path(args.work) / "tuning_times.json")
    if not args.no_tune:
        tune(args, model, times)
    body = compare(args, model, times)
    what = ("a dynamic prompt length", "prefill of t tokens (no cache)", "its four linear layers on dynamic dense "
            "kernels") if args.phase == "prefill" else \
        ("a dynamic cache length", "decode of one token against a cache of t tokens", "its linear layers, of a "
         "static shape, on their tasks' kernels")
    if args.model == "block":
        title, model_text = "A decoder block", "GPT-2-style block (`models.GPTBlock`, d_model 768, 12 heads)"
    else:
        import transformers

        title = f"transformers' GPT-2 ({args.layers} layers)"
        model_text = (f"transformers {transformers.__version__} `GPT2Model` from a `GPT2Config` ({args.layers} "
                      "layers, d_model 768, 12 heads, its default attention; random weights), the new tokens' "
                      "embeddings and a `DynamicCache` of the past keys and values in")
    text = "\n".join([
        f"## {title} with {what[0]}: one dynamic build vs static builds per length "
        "(`benchmarks/bench_dynamic_model.py`)", "",
        (f"CPU {cpu_name(host_llvm_target(args.threads))}, {args.threads} threads (TVM and torch); TVM "
         f"{tvm.__version__}, torch {torch.__version__}. {model_text}, batch 1, "
         f"{what[1]}, float32. Dynamic: one export with t in {RANGE[0]}..{RANGE[1]}, `tune_model` "
         f"{args.dynamic_trials} trials in rounds of an equal share per task, one build ({what[2]}; attention's "
         "products and softmax on the hand-written kernels of symbolic sizes, norms and elementwise ops on the "
         "generic schedules of symbolic loop nests). Static: an export, `tune_model` "
         f"{args.static_trials} trials (rounds of 16) and a build per length. Inductor: `torch.compile(dynamic=True)`. "
         "Backend: `torch.compile(backend=\"autotune\", dynamic=True)` with the dynamic build's log. "
         "Times: the least of 3 interleaved medians of 5 samples; every output checked against eager."), "",
        body])
    report(f"dynamic_model{suffix}", text, write=not args.no_write)


if __name__ == "__main__":
    main()
