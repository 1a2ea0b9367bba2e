"""What packing the weight inside a conv2d kernel costs: one config's kernel with and without the copy.

    python benchmarks/conv_pack_cost.py --shape C=256,H=14 --config 112771
    python benchmarks/conv_pack_cost.py --shape C=512,H=7          # the default (heuristic) packed config
    python benchmarks/conv_pack_cost.py --op depthwise_conv2d --shape C=960,H=7

The conv2d template's packed variant reads the weight as [K/k2, C, R, S, k2]. Its schedule copies the weight into
that layout in every call (what a MetaSchedule database export runs); the kernel autotune compiles from it
(`Template.kernel`) leaves the copy out and takes the weight packed ahead (`Relayout`); the depthwise template's
packed-channel variant does the same. This compiles both and times them side by side, in rounds (least of the
rounds' medians): the share of a call the copy takes. Square 3x3 convolutions, K = C, padding 1, on this CPU.
Prints; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="conv2d", choices=["conv2d", "depthwise_conv2d"])
    ap.add_argument("--shape", default="C=256,H=14", help="C (= K) and H (= W) of a 3x3 convolution, padding 1")
    ap.add_argument("--config", type=int, help="config index (default: the first heuristic config of the "
                                               "packed variant, as an untuned model layer gets)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    import tvm

    from autotune import make_task
    from autotune.kernel import compile_config
    from autotune.model.default_schedule import heuristic_configs
    from autotune.operators import random_inputs
    from autotune.target import to_tvm_target
    from autotune.templates import default_template

    given = dict(kv.split("=") for kv in args.shape.split(","))
    c, h = int(given["C"]), int(given["H"])
    shape = {"N": 1, "C": c, "H": h, "W": h, "R": 3, "S": 3, "padding": 1, **({"K": c} if args.op == "conv2d" else {})}
    task = make_task(args.op, shape)
    tmpl = default_template(task)
    index = args.config
    if index is None:
        index = next(cfg.index for cfg in heuristic_configs(tmpl, task) if tmpl.relayouts(task, cfg))
    prepacked = compile_config(task, index)
    if not tmpl.relayouts(task, prepacked.config):
        raise SystemExit(f"config {index} is of the direct variant: it reads the weight in place")
    copying = tvm.compile(tmpl.apply(task, prepacked.config).mod, target=to_tvm_target(task.target))
    inputs = random_inputs(task.opdef, task.shape, task.dtype, 0)
    dev = prepacked.device
    args_ = [tvm.runtime.tensor(a, dev) for a in inputs]  # the weight as it is, for the copying kernel
    args_.append(tvm.runtime.empty(task.opdef.output_shape(task.shape), task.dtype, dev))
    time_copying = copying.mod.time_evaluator("main", dev, number=1, repeat=args.repeat,
                                              min_repeat_ms=200)
    packed_s = copying_s = float("inf")
    for _ in range(3):
        packed_s = min(packed_s, sorted(prepacked.time(*inputs, repeat=args.repeat))[args.repeat // 2])
        copying_s = min(copying_s, sorted(time_copying(*args_).results)[args.repeat // 2])
    print(f"{args.op} {c}x{h}x{h} 3x3, config {index}: "
          f"{packed_s * 1e3:.3f} ms ({task.flops / packed_s / 1e9:.1f} GFLOPS) on the weight packed ahead, "
          f"{copying_s * 1e3:.3f} ms copying it in the call: the copy is {1 - packed_s / copying_s:.1%} of that call")


if __name__ == "__main__":
    main()
