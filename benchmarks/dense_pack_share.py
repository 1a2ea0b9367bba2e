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


def pack_kernel(n: int, k: int, jb: int, k_inner: bool, target):
    """W [n, k] -> [n/jb, k, jb], scheduled as the dense template packs ("root"): strips of jb rows in parallel,
    jb lanes vectorised; or (k_inner) row by row, 16 lanes of k at a time."""
    W = te.placeholder((n, k), "float32", name="W")
    P = te.compute((n // jb, k, jb), lambda jo, kk, ji: W[jo * jb + ji, kk], name="P")
    sch = tvm.s_tir.Schedule(te.create_prim_func([W, P]))
    jo, kk, ji = sch.get_loops(sch.get_sblock("P"))
    if k_inner:
        sch.reorder(jo, ji, kk)
        sch.vectorize(sch.split(kk, [None, 16])[1])
    else:
        sch.vectorize(ji)
    sch.parallel(jo)
    return tvm.compile(sch.mod, target=target)


def main() -> None:
    task = make_task("dense", "batch=128,in_features=768,out_features=3072")
    here = os.path.dirname(os.path.abspath(__file__))
    kernel = build_best(glob.glob(os.path.join(here, "work/search/dense-*/retimed/retimed.jsonl")), task)
    x, w = random_inputs(task.opdef, task.shape, task.dtype, 0)
    np.testing.assert_allclose(kernel(x, w), x @ w.T, rtol=1e-3, atol=1e-3)
    full = float(np.median(kernel.time(x, w, repeat=7)))
    print(f"best config {kernel.config.to_dict()}: {full * 1e3:.3f} ms = {task.flops / full / 1e9:.0f} GFLOPS")

    (n, k), jb, dev = w.shape, kernel.config["tile_j"][-1], tvm.cpu(0)
    wt, pt = tvm.runtime.tensor(w, dev), tvm.runtime.empty((n // jb, k, jb), "float32", dev)
    for k_inner in (False, True):
        ex = pack_kernel(n, k, jb, k_inner, to_tvm_target(task.target))
        ex(wt, pt)
        assert np.array_equal(pt.numpy(), w.reshape(n // jb, jb, k).transpose(0, 2, 1))
        t = float(np.median(ex.mod.time_evaluator("main", dev, number=1, repeat=7, min_repeat_ms=200)(wt, pt).results))
        if k_inner:
            print(f"pack W alone, k inner: {t * 1e3:.3f} ms = {t / full:.0%} of the kernel")
        else:
            print(f"pack W alone, as the template (j inner): {t * 1e3:.3f} ms = {t / full:.0%} of the kernel; "
                  f"the kernel less this copy: {task.flops / (full - t) / 1e9:.0f} GFLOPS")


if __name__ == "__main__":
    main()
