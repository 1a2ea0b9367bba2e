"""How much of the best dense kernel's time is the packing of W [N, K] into [N/jb, K, jb] (the dense template's
"root" packing, done on every call because W is an input).

    python benchmarks/dense_pack_share.py   # after bench_search.py: its best dense 128x768->3072 config

Times the best config (by its re-timed median in bench_search's work folder) and the packing copy alone, scheduled
as the template schedules it (j inner, vectorised) and the other way round (k inner).
"""
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(__file__))]
from _common import reexec_clean

reexec_clean(2)
import glob

import numpy as np
import tvm
from tvm import te

from autotune import make_task
from autotune.kernel import build_best
from autotune.ops import random_inputs
from autotune.target import to_tvm_target

task = make_task("dense", "batch=128,in_features=768,out_features=3072")
here = os.path.dirname(os.path.abspath(__file__))
k = build_best(glob.glob(os.path.join(here, "work/search/dense-*/retimed/retimed.jsonl")), task)
x, w = random_inputs(task.opdef, task.shape, task.dtype, 0)
np.testing.assert_allclose(k(x, w), x @ w.T, rtol=1e-3, atol=1e-3)
full = float(np.median(k.time(x, w, repeat=7)))
print("best config", k.config.to_dict(), f"full kernel {full * 1e3:.3f} ms = {task.flops / full / 1e9:.0f} GFLOPS")

N, K = 3072, 768
jb = k.config["tile_j"][-1]
dev = tvm.cpu(0)
W = te.placeholder((N, K), "float32", name="W")
for order in ("j-inner (as the template)", "k-inner"):
    P = te.compute((N // jb, K, jb), lambda jo, kk, ji: W[jo * jb + ji, kk], name="P")
    sch = tvm.s_tir.Schedule(te.create_prim_func([W, P]))
    jo, kk, ji = sch.get_loops(sch.get_sblock("P"))
    if order.startswith("k"):
        sch.reorder(jo, ji, kk)
        sch.vectorize(sch.split(kk, [None, 16])[1])
    else:
        sch.vectorize(ji)
    sch.parallel(jo)
    ex = tvm.compile(sch.mod, target=to_tvm_target(task.target))
    wt, pt = tvm.runtime.tensor(w, dev), tvm.runtime.empty((N // jb, K, jb), "float32", dev)
    ex(wt, pt)
    assert np.array_equal(pt.numpy(), w.reshape(N // jb, jb, K).transpose(0, 2, 1))
    r = ex.mod.time_evaluator("main", dev, number=1, repeat=7, min_repeat_ms=200)(wt, pt)
    t = float(np.median(r.results))
    rest = f"; the kernel less this copy: {task.flops / (full - t) / 1e9:.0f} GFLOPS" if order.startswith("j") else ""
    print(f"pack W alone, {order}: {t * 1e3:.3f} ms = {t / full:.0%} of the kernel{rest}")
