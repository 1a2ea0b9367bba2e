"""What packing the weight inside a conv2d kernel costs: the kernel of one config, and its weight packing alone.

    python benchmarks/conv_pack_cost.py --shape C=256,H=14 --config 112771
    python benchmarks/conv_pack_cost.py --shape C=512,H=7          # the default (heuristic) packed config

The conv2d template's packed variant reads the weight as [K/k2, C, R, S, k2]. Its kernel takes the weight packed
ahead (`Relayout`); the schedule's trace (a MetaSchedule database export) copies it on every call instead. This
times a config's kernel and, beside it, a kernel that does only that copy, scheduled as the template schedules it
(parallel over K/k2, vectorised over k2): what packing the weight in every call costs. Square 3x3 convolutions,
K = C, padding 1, on this CPU. Prints; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="C=256,H=14", help="C (= K) and H (= W) of a 3x3 convolution, padding 1")
    ap.add_argument("--config", type=int, help="config index (default: the first heuristic config of the "
                                               "packed variant, as an untuned model layer gets)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    import tvm
    from tvm import s_tir, te

    import search_spaces
    from autotune import make_task
    from autotune.kernel import compile_config
    from autotune.model.default_schedule import heuristic_configs
    from autotune.ops import random_inputs
    from autotune.target import to_tvm_target
    from search_spaces.common import VECTOR_LANES, parallel_fused, vectorize_inner

    given = dict(kv.split("=") for kv in args.shape.split(","))
    c, h = int(given["C"]), int(given["H"])
    task = make_task("conv2d", {"N": 1, "C": c, "H": h, "W": h, "K": c, "R": 3, "S": 3, "padding": 1})
    index = args.config
    if index is None:
        tmpl = search_spaces.resolve(search_spaces.default_template_ref("conv2d", "llvm"))
        index = next(cfg.index for cfg in heuristic_configs(tmpl.define_space(task), task) if cfg["vec_axis"] == "k")
    kernel = compile_config(task, index)
    if kernel.config["vec_axis"] != "k":
        raise SystemExit(f"config {index} is of the direct variant: it reads the weight in place")
    inputs = random_inputs(task.opdef, task.shape, task.dtype, 0)
    conv_s = min(kernel.time(*inputs, repeat=args.repeat))

    kb = kernel.config["tile_k"][-1]
    weight = te.placeholder((c, c, 3, 3), task.dtype, name="weight")
    packed = te.compute((c // kb, c, 3, 3, kb), lambda a, ci, r, s, b: weight[a * kb + b, ci, r, s], name="packed")
    sch = s_tir.Schedule(te.create_prim_func([weight, packed]))
    block = sch.get_sblock("packed")
    parallel_fused(sch, sch.get_loops(block)[:1])
    vectorize_inner(sch, block, VECTOR_LANES)
    pack = tvm.compile(sch.mod, target=to_tvm_target(task.target))
    dev = tvm.cpu(0)
    args_ = [tvm.runtime.tensor(inputs[1], dev), tvm.runtime.empty((c // kb, c, 3, 3, kb), task.dtype, dev)]
    pack_s = min(pack.mod.time_evaluator("main", dev, number=1, repeat=args.repeat, min_repeat_ms=200)(*args_).results)
    print(f"conv2d {c}x{h}x{h} 3x3, config {index} (k2 = {kb}): {conv_s * 1e3:.3f} ms "
          f"({task.flops / conv_s / 1e9:.1f} GFLOPS) on the weight packed ahead; packing it alone "
          f"{pack_s * 1e3:.3f} ms, {pack_s / (conv_s + pack_s):.1%} of a call that packs it")


if __name__ == "__main__":
    main()
