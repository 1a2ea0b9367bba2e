"""Dynamic shapes: hardware model, uKernel ranking, composition, the dispatching kernel, the CLI path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import UNHURRIED_CLI

from autotune.cli import main
from autotune.dynamic import cpu_model, cuda_model, load, parse_dynamic, rank_ukernels
from autotune.dynamic.compose import Planner
from autotune.dynamic.dispatch import ALIGN, aligned_empty
from autotune.dynamic.tuning import mapped_configs
from autotune.dynamic.ukernels import LOW_END_PADDING, chosen_heights
from autotune.database import TuningDatabase
from autotune.errors import AutotuneError
from autotune.hardware import parse_size
from autotune.measure.types import MeasureInput, MeasureResult
from autotune.records import Record, load_records

SHAPE = "M=1..300,N=64,K=64"
CLI_ARGS = ["tune", "matmul", "--shape", SHAPE, "--dynamic", "--trials", "4", "--tuner", "random",
            *UNHURRIED_CLI, "--quiet", "--max-ukernels", "3"]
SIZES = [1, 2, 3, 5, 7, 13, 16, 23, 31, 47, 48, 64, 97, 127, 255, 300, 301, 997]


def _flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_cpu_model_reads_this_machine():
    hw = cpu_model({"kind": "llvm", "num-cores": 2})
    assert hw.l1d_bytes > 0 and hw.l2_bytes > 0 and hw.l2_bytes > hw.l1d_bytes
    assert hw.cores == 2 and hw.ghz > 0.5 and hw.peak_gflops > 0
    if "avx512f" in _flags():
        assert (hw.lanes, hw.vector_registers) == (16, 32)
    else:
        assert hw.lanes in (4, 8)
    assert (parse_size("48K"), parse_size("2048K"), parse_size("1M")) == (48 * 1024, 2 * 1024**2, 1024**2)


def test_cuda_model_from_arch():
    h100, unknown = cuda_model("sm_90"), cuda_model("sm_91")
    assert (h100.sms, h100.warp_size, h100.shared_per_block) == (132, 32, 48 * 1024)
    assert unknown.sms == 132 and cuda_model("sm_80").sms == 108


@pytest.mark.parametrize("op,shape", [("matmul", "M=1..4096,N=768,K=768"), ("matmul", "M=1..2048,N=3072,K=768"),
                                      ("dense", "batch=1..512,in_features=768,out_features=768"),
                                      ("batch_matmul", "B=1..64,M=128,N=64,K=64")])
def test_candidates_ranked_and_few(op, shape):
    spec = parse_dynamic(op, shape)
    cands = rank_ukernels(spec, cpu_model(spec.target), max_kernels=3)
    chosen = chosen_heights(cands)  # at most 3, and one for the low end
    assert 1 <= len(chosen) <= 4 and [c.rank for c in cands] == list(range(1, len(cands) + 1))
    assert len(chosen) <= 3 or min(chosen) <= LOW_END_PADDING * spec.lo
    assert all(c.chosen for c in cands[:len(chosen)]) and not any(c.chosen for c in cands[len(chosen):])
    assert all(1 <= c.height <= spec.hi and c.predicted_s > 0 for c in cands)
    scores = [c.score for c in cands[:len(chosen)]]
    assert scores == sorted(scores, reverse=True) and scores[-1] >= 1.0  # each pick helps; never beats exact size
    cuda = rank_ukernels(parse_dynamic(op, shape, target="cuda"), cuda_model("sm_90"))
    assert 1 <= len(chosen_heights(cuda)) <= 3


def test_wide_range_gets_small_and_tall_ukernels():
    chosen = chosen_heights(rank_ukernels(parse_dynamic("matmul", "M=1..4096,N=768,K=768"), cpu_model()))
    assert len(chosen) >= 2 and max(chosen) >= 64
    assert min(chosen) <= LOW_END_PADDING  # the low end (one row) on a uKernel of a few rows, not a padded tall one
    higher = chosen_heights(rank_ukernels(parse_dynamic("matmul", "M=64..4096,N=768,K=768"), cpu_model()))
    assert min(higher) > LOW_END_PADDING and min(higher) <= 64 * LOW_END_PADDING


def test_composition_covers_every_size_exactly_once():
    rng = np.random.default_rng(0)
    for trial in range(4):
        heights = sorted({int(h) for h in rng.integers(1, 70, size=3)}, reverse=True)
        costs = [h * float(rng.uniform(0.5, 1.5)) + 2.0 for h in heights]
        planner = Planner(heights, costs, lambda k, rows: 0.1 * rows)
        for m in range(1, 301):
            plan = planner.plan(m)
            covered = np.zeros(m, int)
            for p in plan.pieces:
                covered[p.offset:p.offset + p.rows] += 1
                assert p.rows == p.height or p is plan.pieces[-1]  # only the tail is padded
            assert (covered == 1).all(), (heights, m, plan)
            naive = (m // heights[0]) * costs[0] + (costs[0] + 0.1 * (m % heights[0]) if m % heights[0] else 0)
            assert plan.predicted_s <= naive + 1e-9


def test_plan_table_is_the_planners_cover_and_repeats_the_tallest_beyond_it():
    """The compiled kernel's plans (`compiled.plan_of` mirrors its arithmetic): the planner's within the table; a
    larger size takes the tallest uKernel until the rest is in the table; every size covered exactly."""
    from autotune.dynamic.compiled import plan_of, plan_table

    heights = [48, 12, 5]
    planner = Planner(heights, [48.0, 13.0, 6.5], lambda k, rows: 0.5)
    table = plan_table(planner, 100)
    assert table.shape == (100 + 48 + 1, 5)
    for m in range(1, 700):
        cover = plan_of(table, heights, m)
        tail = cover.tail_rows
        assert sum(c * h for c, h in zip(cover.counts, heights)) + tail == m, m
        assert 0 <= tail < heights[cover.tail_kernel] or tail == 0
        if m < table.shape[0]:
            whole = [sum(1 for p in planner.plan(m).pieces if p.kernel == k and not p.padded) for k in range(3)]
            assert list(cover.counts) == whole, m
        else:  # the tallest repeats: all the rows beyond the table's last are in its pieces
            assert cover.counts[0] * heights[0] >= m - (table.shape[0] - 1), m


def test_the_planner_plans_large_sizes_as_the_compiled_table_does():
    """Beyond the sizes it plans exactly (a range of an image's pixels reaches millions of rows), the planner
    takes pieces of the tallest uKernel first, as the full table's code does: the same covers, found at once."""
    from autotune.dynamic.compiled import plan_of, plan_table
    from autotune.dynamic.compose import PLANNED_ROWS

    heights = [256, 64, 4]
    planner = Planner(heights, [30.0, 8.0, 1.0], lambda k, rows: 0.5)
    table = plan_table(planner, 10 * PLANNED_ROWS)
    for m in (PLANNED_ROWS + 257, 3 * PLANNED_ROWS + 5, 16_000_003):
        plan = planner.plan(m)
        whole = [sum(1 for p in plan.pieces if p.kernel == k and not p.padded) for k in range(3)]
        assert whole == list(plan_of(table, heights, m).counts), m
        assert sum(p.rows for p in plan.pieces) == m
        assert plan.predicted_s == pytest.approx(planner.cost(m))


def test_a_range_too_large_for_a_tensor_is_cut_to_what_fits():
    """A batch times an image's pixels can exceed what TVM's 32-bit indexing holds: the range stops there."""
    from autotune.dynamic.spec import within_limits

    fixed = {"in_features": 288, "out_features": 64}
    assert within_limits("dense", fixed, "batch", 4096) == 4096
    top = within_limits("dense", fixed, "batch", 4096 * 4096)
    assert top == (2**31 - 1) // 288
    parse_dynamic("dense", f"batch=1..{top},in_features=288,out_features=64")
    with pytest.raises(AutotuneError, match="shape too large"):
        parse_dynamic("dense", f"batch=1..{top + 1},in_features=288,out_features=64")


def test_composition_picks_the_cheaper_cover():
    planner = Planner([8, 3], [8.0, 3.5], lambda k, rows: 1.0)
    assert planner.plan(9).describe() == "3x3" and planner.cost(9) == pytest.approx(10.5)
    assert planner.plan(8).describe() == "1x8"
    assert planner.plan(1).describe() == "pad 1/3" and planner.cost(1) == pytest.approx(4.5)


@pytest.mark.parametrize("text,needle", [
    ("M=1..x,N=4,K=4", "bad range"), ("M=9..2,N=4,K=4", "need 1 <= lo <= hi"),
    ("M=4,N=1..4,K=4", "needs exactly one range, on M"), ("M=4,N=4,K=4", "needs exactly one range"),
    ("M=1..4,N=4", "missing parameter(s) K"), ("M=1..4,N=4,K=4,Z=2", "unknown parameter(s) Z")])
def test_bad_dynamic_shapes(text, needle):
    with pytest.raises(AutotuneError, match=None) as err:
        parse_dynamic("matmul", text)
    assert needle in str(err.value)


@pytest.mark.parametrize("args,needle", [
    (["--shape", "M=1..x,N=4,K=4", "--dynamic"], "bad range 'M=1..x'"),
    (["--shape", "M=1..64,N=4,K=4"], "needs --dynamic"),
    pytest.param(["--shape", "M=1..64,N=4,K=4", "--dynamic", "--trials", "0"], "must be >= 1",
                 marks=pytest.mark.slow)])  # found after TVM is imported: seconds
def test_cli_bad_range_is_one_line(args, needle):
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "tune", "matmul", *args], capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_mapped_configs_keep_the_donor_knobs():
    from autotune.templates import resolve

    spec = parse_dynamic("matmul", SHAPE)
    tmpl = resolve("search_spaces.matmul:MATMUL_CPU")
    tall, small = (tmpl.define_space(spec.task(h)) for h in (96, 24))
    donors = [Record(MeasureInput(spec.task(96), tall.get(i), "search_spaces.matmul:MATMUL_CPU"),
                     MeasureResult((t,), None, "", 0.0, 0.0), tmpl.version, 2, {})
              for i, t in [(len(tall) // 3, 2e-6), (len(tall) // 2, 1e-6), (7, 5e-6)]]
    mapped = mapped_configs(small, donors, 2)
    assert len(mapped) == 2
    fastest = donors[1].input.config
    cfg = small.get(mapped[0])
    assert all(cfg[k] == fastest[k] for k in fastest.knobs if k != "tile_i")
    assert np.prod(cfg["tile_i"]) == 24 and cfg["tile_i"] in small["tile_i"].candidates


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    """uKernels of SHAPE tuned through the CLI (random tuner: 4 trials for the tallest, 2 seeds each other)."""
    log = tmp_path_factory.mktemp("dyn") / "dyn.jsonl"
    assert main([*CLI_ARGS, "--log", str(log)]) == 0
    return log


def test_cli_dynamic_writes_log_and_resumes(tuned_log, capsys):
    lines = tuned_log.read_text().splitlines()
    tasks = {r.task.key for r in load_records(tuned_log)}
    configs = {(r.task.key, r.input.config.index) for r in load_records(tuned_log)}
    assert 2 <= len(tasks) <= 4 and len(configs) == 4 + 2 * (len(tasks) - 1)  # tallest: --trials; others: 2 seeds
    assert len(lines) <= len(configs) + 2 * 4  # the tallest's contenders re-timed twice (--retime 2)
    refs = {r.input.template for r in load_records(tuned_log)}
    assert refs == {"search_spaces.matmul:MATMUL_UKERNEL_CPU"}  # B read in place: no packing per piece
    capsys.readouterr()
    assert main([*CLI_ARGS, "--log", str(tuned_log)]) == 0
    captured = capsys.readouterr()
    assert tuned_log.read_text().splitlines() == lines  # nothing measured again
    assert f"resumed {len(configs)} records" in captured.err and "uKernel M=" in captured.out


def test_dynamic_kernel_matches_numpy_for_every_size(tuned_log):
    kernel = load(tuned_log, "matmul", SHAPE)
    tallest = max(u.height for u in kernel.ukernels)
    assert len(kernel.ukernels) >= 2 and max(SIZES) > tallest
    rng = np.random.default_rng(1)
    b = rng.uniform(-1, 1, (64, 64)).astype("float32")
    for m in SIZES:
        a = rng.uniform(-1, 1, (m, 64)).astype("float32")
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4, err_msg=f"M={m}")
        assert sum(p.rows for p in kernel.plan(m).pieces) == m


def test_unaligned_arrays_go_through_scratch(tuned_log):
    kernel = load(tuned_log, "matmul", SHAPE)
    rng = np.random.default_rng(2)
    m = 257

    def unaligned(shape):
        raw = aligned_empty((int(np.prod(shape)) + 1,))
        return raw[1:].reshape(shape)  # 4 bytes past a 64-byte boundary

    a, b, c = unaligned((m, 64)), unaligned((64, 64)), unaligned((m, 64))
    a[...] = rng.uniform(-1, 1, a.shape)
    b[...] = rng.uniform(-1, 1, b.shape)
    assert all(x.__array_interface__["data"][0] % ALIGN for x in (a, b, c))
    kernel.run(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(AutotuneError, match="expects inputs of shapes"):
        kernel(a, b[:32])


_LOAD_AND_RUN = """
import sys, numpy as np
sys.modules["torch"] = None  # a process without PyTorch: TVM's runtime alone runs the model
from autotune.model import load_library
model = load_library(sys.argv[1])
for m in (1, 7, 97, 300):
    x = np.load(sys.argv[2] + f"/x{m}.npy")
    np.save(sys.argv[2] + f"/y{m}.npy", model(x))
"""


def _residual_mlp():
    """relu(x W1) W2 + b + x[:, :16]: epilogues of a ReLU, and of a bias and a residual cut by rows."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 16)

        def forward(self, x):
            return self.l2(torch.relu(self.l1(x))) + x[:, :16]

    return Net().eval()


def test_model_with_dynamic_batch_exports_its_dynamic_kernels(tmp_path):
    """A linear layer with a dynamic batch is a dynamic dense: on the log's uKernels where it tunes them, else on
    the shipped or heuristic configs. The elementwise ops after it run in its uKernels' write-back (a residual's
    rows cut with the input's). The cover of every size is compiled into the module: it exports, loads in a fresh
    process and matches PyTorch at every size."""
    torch = pytest.importorskip("torch")
    from autotune.model.build import build_model

    log = tmp_path / "dense.jsonl"
    assert main(["tune", "dense", "--shape", "batch=1..300,in_features=64,out_features=64", "--dynamic", "--trials",
                 "2", "--tuner", "random", *UNHURRIED_CLI, "--quiet", "--log", str(log)]) == 0

    torch.manual_seed(0)
    model = _residual_mlp()
    batch = torch.export.Dim("batch", min=1, max=300)
    program = torch.export.export(model, (torch.randn(4, 64),), dynamic_shapes={"x": {0: batch}})
    built = build_model(program, logs=[log])
    summary = built.report.summary()
    assert "1 of 2 dynamic layers use tuned uKernels" in summary, summary
    assert "dense(batch=1..300,in_features=64,out_features=64): uKernels from the logs; 3, 2 and 1 rows derived from " \
           "them (the epilogue in their write-back: relu)" in summary, summary
    assert "dense(batch=1..300,in_features=64,out_features=16): uKernels on" in summary
    assert "(the epilogue in their write-back: add, strided_slice)" in summary or \
           "(the epilogue in their write-back: strided_slice, add)" in summary, summary
    want = {}
    for m in (1, 7, 97, 300):
        x = torch.randn(m, 64)
        with torch.no_grad():
            want[m] = model(x).numpy()
        np.save(tmp_path / f"x{m}.npy", x.numpy())
        np.testing.assert_allclose(built(x), want[m], rtol=1e-4, atol=1e-4)
    built.export_library(tmp_path / "model.so")
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, str(tmp_path / "model.so"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    for m, ref in want.items():
        np.testing.assert_allclose(np.load(tmp_path / f"y{m}.npy"), ref, rtol=1e-4, atol=1e-4, err_msg=f"batch={m}")


def test_rows_of_two_symbolic_sizes_keep_their_epilogue_apart():
    """A linear layer over a batch times a length (flattened): its rows are no one size to bind to a uKernel's
    height, so its bias and ReLU run after it (no failed fusion, no warning), equal to PyTorch."""
    import warnings

    torch = pytest.importorskip("torch")
    from autotune.model.build import build_model

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 8)

        def forward(self, x):
            return torch.relu(self.fc(x.reshape(-1, 16)))

    torch.manual_seed(0)
    model = Net().eval()
    b, t = torch.export.Dim("b", min=1, max=4), torch.export.Dim("t", min=1, max=8)
    program = torch.export.export(model, (torch.randn(2, 3, 16),), dynamic_shapes={"x": {0: b, 1: t}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        built = build_model(program, shipped=False)
    assert "write-back" not in built.report.summary()
    for shape in ((1, 1), (3, 7), (4, 8)):
        x = torch.randn(*shape, 16)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-5, atol=1e-5)

@pytest.mark.slow  # tune-model and builds: 13 s; the default tier tunes a dynamic program in the test below
def test_tune_model_tunes_the_dynamic_sites_then_builds_from_them(tmp_path):
    """extract / tune-model on a program with a dynamic batch: each dynamic matmul's tallest uKernel is a task,
    weighted by the site's time in calls of it; the budget tunes them and the build uses them for every site."""
    torch = pytest.importorskip("torch")
    from conftest import UNHURRIED

    from autotune.model import build_model, extract_tasks, tune_model

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64)).eval()
    batch = torch.export.Dim("batch", min=1, max=200)
    program = torch.export.export(model, (torch.randn(4, 48),), dynamic_shapes={"input": {0: batch}})
    tasks = extract_tasks(program)
    shapes = {(t.shape["out_features"], t.shape["in_features"]) for t, _ in tasks}
    assert {t.op for t, _ in tasks} == {"dense"} and shapes == {(64, 48), (64, 64)}
    assert all(1 <= t.shape["batch"] <= 200 and w >= 0.05 for t, w in tasks), tasks
    shared = [w for t, w in tasks if (t.shape["out_features"], t.shape["in_features"]) == (64, 64)]
    alone = {t.shape["batch"]: w for t, w in tasks if (t.shape["out_features"], t.shape["in_features"]) == (64, 48)}
    assert sum(shared) > sum(alone.values())  # two sites share the (64, 64) kernel: twice the pieces
    log = tmp_path / "dyn-model.jsonl"
    result = tune_model(program, trials=len(tasks) * 2, log=log, tuner="random", round_trials=2, retime=0,
                        runner_options=UNHURRIED, progress=lambda m: None)
    assert {s.task.key for s in result.states} == {t.key for t, _ in tasks}
    assert {r.input.template for r in load_records(log)} == {"search_spaces.matmul:DENSE_CPU"}
    built = build_model(program, logs=[log])
    assert "2 of 2 dynamic layers use tuned uKernels" in built.report.summary()
    for m in (1, 9, 200):
        x = torch.randn(m, 48)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-4, err_msg=f"batch={m}")


def test_a_dynamic_programs_calls_of_a_static_shape_are_tasks_too(tmp_path):
    """A program with a dynamic and a static input (a decode step's cache and token): the linear layer on the
    static one is an ordinary task, tuned with the uKernels and built on its record as a static build does."""
    torch = pytest.importorskip("torch")
    from conftest import FakeBuilder, SimulatedRunner

    from autotune.model import build_model, extract_tasks, tune_model

    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rows, self.token = torch.nn.Linear(32, 24), torch.nn.Linear(32, 40)

        def forward(self, x, y):
            return self.rows(x), self.token(y)

    torch.manual_seed(2)
    model = TwoInputs().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.randn(5, 32), torch.randn(1, 32)),
                                  dynamic_shapes={"x": {0: batch}, "y": None})
    tasks = extract_tasks(program)
    static = [t for t, _ in tasks if 40 in t.shape.values()]  # the token's layer: one row, 40 outputs
    assert len(static) == 1 and 1 in static[0].shape.values()
    assert {t.op for t, _ in tasks if t not in static} == {"dense"}
    log = tmp_path / "two.jsonl"
    simulated = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-5 * (1 + cfg.index % 5))}
    tune_model(program, trials=2 * len(tasks), log=log, tuner="random", round_trials=2, retime=0,
               progress=lambda m: None, **simulated)
    assert static[0].key in {r.task.key for r in load_records(log)}
    built = build_model(program, logs=[log])
    assert "calls of a static shape: 1 of 1 tasks tuned from logs" in built.report.summary()
    x, y = torch.randn(9, 32), torch.randn(1, 32)
    with torch.no_grad():
        for got, want in zip(built(x, y), model(x, y)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_cli_extracts_and_builds_a_saved_dynamic_program(tmp_path, capsys):
    """`autotune extract` and `autotune build -o` on a .pt2 saved with a dynamic batch: the uKernel tasks, then a
    library with the symbolic input described."""
    torch = pytest.importorskip("torch")
    from autotune.model import load_library

    model = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.Tanh()).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.randn(3, 32),), dynamic_shapes={"input": {0: batch}})
    saved = tmp_path / "mlp.pt2"
    torch.export.save(program, saved)
    assert main(["extract", str(saved)]) == 0
    assert "dense(batch=" in capsys.readouterr().out
    out = tmp_path / "mlp.so"
    assert main(["build", str(saved), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "0 of 1 dynamic layers use tuned uKernels" in printed and "in 1..64, 32] float32" in printed
    x = torch.randn(17, 32)
    with torch.no_grad():
        np.testing.assert_allclose(load_library(out)(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_convolutions_of_a_dynamic_batch_are_dynamic_conv2d_kernels():
    """A CNN exported with a dynamic batch: its convolutions' uKernels are tasks (batch heights), and its build runs
    every batch of the range on dynamic conv2d kernels, equal to PyTorch."""
    torch = pytest.importorskip("torch")
    from autotune.model import build_model, extract_tasks

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(model, (torch.randn(2, 3, 12, 12),), dynamic_shapes={"input": {0: batch}})
    tasks = [t for t, _ in extract_tasks(program)]
    assert {t.op for t in tasks} == {"conv2d"} and len({t.shape["C"] for t in tasks}) == 2
    assert {t.shape["N"] for t in tasks} <= set(range(1, 9)) and max(t.shape["N"] for t in tasks) > 1
    built = build_model(program, shipped=False)
    assert "0 of 2 dynamic layers use tuned uKernels" in built.report.summary()
    assert "conv2d --shape N=1..8,C=8,H=12,W=12,K=16,R=3,S=3,stride=2,padding=1" in built.report.summary()
    summary = built.report.summary()  # each conv's bias add (and the first's ReLU) in its uKernels' write-back
    assert "(the epilogue in their write-back: add, relu)" in summary and "write-back: add)" in summary
    for n in (1, 3, 8):
        x = torch.randn(n, 3, 12, 12)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-4)


_LOAD_AND_RUN_LENGTHS = """
import sys, numpy as np
sys.modules["torch"] = None  # a process without PyTorch: TVM's runtime alone runs the model
from autotune.model import load_library
model = load_library(sys.argv[1])
for t in (1, 5, 17, 40):
    np.save(sys.argv[2] + f"/y{t}.npy", model(np.load(sys.argv[2] + f"/x{t}.npy")))
"""


@pytest.mark.slow  # a build of attention's kernels and an export: 15 s
def test_attention_with_a_dynamic_length_exports_and_matches_torch_in_a_fresh_process(tmp_path):
    """A causal self-attention block with a dynamic sequence length: its linear layers on dynamic dense kernels,
    q·kᵀ on the kernel reading the keys as they are, p·v and softmax on the kernels of symbolic sizes; the module
    exports, loads in a fresh process and matches PyTorch at every length."""
    torch = pytest.importorskip("torch")
    from autotune.model import build_model

    class Attention(torch.nn.Module):
        def __init__(self, d: int = 32, heads: int = 2):
            super().__init__()
            self.heads, self.qkv, self.out = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in self.qkv(x).split(d, dim=2))
            scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            y = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
            return self.out(y.transpose(1, 2).reshape(b, t, d))

    torch.manual_seed(0)
    model = Attention().eval()
    length = torch.export.Dim("t", min=1, max=64)
    program = torch.export.export(model, (torch.randn(1, 8, 32),), dynamic_shapes={"x": {1: length}})
    built = build_model(program, shipped=False)
    summary = built.report.summary()
    assert "dynamic_batch_matmul_nt_k16" in summary and "dynamic_softmax" in summary, summary
    built.export_library(tmp_path / "attention.so")
    want = {}
    for t in (1, 5, 17, 40):
        x = torch.randn(1, t, 32)
        with torch.no_grad():
            want[t] = model(x).numpy()
        np.save(tmp_path / f"x{t}.npy", x.numpy())
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN_LENGTHS, str(tmp_path / "attention.so"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    for t, ref in want.items():
        np.testing.assert_allclose(np.load(tmp_path / f"y{t}.npy"), ref, rtol=1e-4, atol=1e-4, err_msg=f"t={t}")


@pytest.mark.slow  # the default tier's dynamic dense: the model tests'
def test_dynamic_dense_relays_its_weight_per_ukernel_in_any_dtype(tmp_path):
    """dense's uKernels take the weight packed (each its own tile): the dynamic kernel relays it for each; an int8
    kernel takes int8 and gives exact int32."""
    shape = "batch=1..80,in_features=64,out_features=48"
    log = tmp_path / "dense.jsonl"
    args = ["tune", "dense", "--shape", shape, "--dynamic", "--dtype", "int8", "--trials", "2", "--tuner", "random",
            *UNHURRIED_CLI, "--log", str(log)]
    assert main(args) == 0
    kernel = load(log, "dense", shape, dtype="int8")
    assert any(u.relayouts for u in kernel.ukernels)
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (48, 64)).astype(np.int8)
    for rows in (1, 17, 80):
        x = rng.integers(-128, 128, (rows, 64)).astype(np.int8)
        y = kernel(x, w)
        assert y.dtype == np.int32 and np.array_equal(y, x.astype(np.int32) @ w.astype(np.int32).T), rows


def test_a_derived_ukernel_costs_its_donors_time_scaled_by_the_hardware_model_so_few_rows_take_one_padded_piece():
    """A uKernel derived from a taller tuned one costs the donor's measured time times the hardware model's ratio of
    their predicted times, not the ratio of their rows: a few rows of a layer with a large weight take about the
    time of streaming it, so 7 rows run on one padded 8-row piece (the weight read once), not 4 + 3 (read twice)."""
    from autotune.dynamic.dispatch import DynamicKernel, UKernel
    from autotune.dynamic.load import default_ukernels, derived_ukernels
    from autotune.dynamic.ukernels import op_cost, predict_time
    from autotune.hardware import hardware_model

    spec = parse_dynamic("dense", "batch=1..1024,in_features=768,out_features=3072")
    [tall], _ = default_ukernels(spec, shipped=False, heights=[48])
    donor = UKernel(48, tall.task, tall.func, 700e-6, None, tall.template, tall.config)  # "measured" 0.7 ms
    derived = derived_ukernels(spec, [donor], [16, 8, 4, 3])
    hw, cost = hardware_model(spec.target), op_cost(spec)
    for u in derived:
        assert u.mean_s == pytest.approx(700e-6 * predict_time(hw, cost, u.height) / predict_time(hw, cost, 48))
        assert u.mean_s > 700e-6 * u.height / 48 * 1.1, u.height  # above the share of its rows
    kernel = DynamicKernel(spec, [donor, *derived])
    assert kernel.plan(7).describe() == "pad 7/8"
    rng = np.random.default_rng(5)
    w = rng.uniform(-1, 1, (3072, 768)).astype("float32")
    for m in (7, 31):
        x = rng.uniform(-1, 1, (m, 768)).astype("float32")
        np.testing.assert_allclose(kernel(x, w), x @ w.T, rtol=1e-3, atol=1e-3, err_msg=f"batch={m}")


def test_the_range_low_end_gets_ukernels_of_its_rows_derived_from_the_smallest():
    """A range from one row gets uKernels of 1, 2 and 3 rows with no tuning: the smallest uKernel's config mapped onto
    their spaces (the weight packed alike); those of fewer rows than its register tile take two or four weight
    panels per parallel job (at least two jobs), the others its knobs; their planner costs below the smallest's.
    One row then runs on the 1-row uKernel, not a padded piece of a taller one, and every size still matches
    numpy."""
    from autotune.dynamic.dispatch import DynamicKernel
    from autotune.dynamic.load import default_ukernels, derived_ukernels, low_end_heights

    spec = parse_dynamic("dense", "batch=1..200,in_features=64,out_features=192")
    ukernels, _ = default_ukernels(spec, shipped=False, heights=[32, 8])
    assert low_end_heights(spec, [32, 8]) == [3, 2, 1]
    low = derived_ukernels(spec, ukernels, [3, 2, 1])
    assert [u.height for u in low] == [3, 2, 1]
    smallest = ukernels[-1]
    assert all(u.mean_s < smallest.mean_s for u in low)
    rng = np.random.default_rng(4)
    w = rng.uniform(-1, 1, (192, 64)).astype("float32")
    packed = [u.fixed_operand(1, w) for u in (smallest, *low)]
    assert all(np.array_equal(p, packed[0]) for p in packed)
    tile_rows = smallest.config["tile_i"][-1]
    assert 1 < tile_rows <= 3  # the heuristic 8-row config's register tile: both cases below
    for u in low:  # under its tile's rows: two or four weight panels per job (two jobs at least), 4 rows of K a step
        outer, mid, width = u.config["tile_j"]
        if u.height < tile_rows:
            assert mid in (2, 4) and outer >= 2 and width == smallest.config["tile_j"][-1], u.config
            assert u.config["tile_k"] == (16, 4), u.config
        else:
            assert {k: v for k, v in u.config.knobs.items() if k != "tile_i"} == \
                {k: v for k, v in smallest.config.knobs.items() if k != "tile_i"}
    kernel = DynamicKernel(spec, ukernels + low)
    assert [(p.height, p.padded) for p in kernel.plan(1).pieces] == [(1, False)]
    for m in (1, 2, 3, 5, 7, 9, 41, 200):
        x = rng.uniform(-1, 1, (m, 64)).astype("float32")
        np.testing.assert_allclose(kernel(x, w), x @ w.T, rtol=1e-4, atol=1e-4, err_msg=f"batch={m}")
    assert low_end_heights(parse_dynamic("dense", "batch=8..200,in_features=64,out_features=192"), [32, 8]) == []
    cuda = parse_dynamic("dense", "batch=1..200,in_features=64,out_features=48", target="cuda")
    assert low_end_heights(cuda, [32, 8]) == []


def test_a_site_tuned_at_its_tallest_ukernel_derives_the_others():
    """On a CPU a model's dynamic site is one task, its tallest uKernel, weighted by the site's time over the range
    in calls of it; the build derives the other heights from its record: the same weight panels (the weight packed
    alike), the register tile kept where they have its rows (fewer: more panels per parallel job), planner costs
    the tallest's time scaled by the hardware model. Every size matches numpy. On a GPU each chosen uKernel is a
    task."""
    from autotune.dynamic.dispatch import DynamicKernel
    from autotune.dynamic.load import model_ukernels
    from autotune.dynamic.sites import pieces_per_call, ukernel_tasks
    from autotune.dynamic.ukernels import op_cost, predict_time
    from autotune.hardware import hardware_model
    from autotune.templates import heuristic_configs, resolve

    spec = parse_dynamic("dense", "batch=1..200,in_features=64,out_features=192")
    heights = chosen_heights(rank_ukernels(spec, hardware_model(spec.target)))
    assert len(heights) > 1
    tasks = ukernel_tasks(spec, calls=2)
    assert [t for t, _ in tasks] == [spec.task(heights[0])]
    assert tasks[0][1] > 2 * pieces_per_call(spec, heights)[heights[0]]  # the smaller pieces count too
    cuda = parse_dynamic("dense", "batch=1..200,in_features=64,out_features=48", target="cuda")
    assert len(ukernel_tasks(cuda, calls=1)) == len(chosen_heights(rank_ukernels(cuda, hardware_model(cuda.target))))

    ref = "search_spaces.matmul:DENSE_CPU"
    template, tall = resolve(ref), spec.task(heights[0])
    config = heuristic_configs(template, tall, count=1)[0]
    record = Record(MeasureInput(tall, config, ref), MeasureResult((1e-4,), None, "", 0.0, 0.0), template.version, 1,
                    {})
    found = model_ukernels(spec, TuningDatabase([record]))
    lacking = {h for h in heights[1:] if 2 * h < heights[0]}  # within a factor 2 the tallest stands in
    assert lacking and found.source == "logs" and set(found.derived) == lacking | {1, 2, 3}
    by_height = {u.height: u for u in found.ukernels}
    assert by_height[heights[0]].config == config
    rng = np.random.default_rng(5)
    w = rng.uniform(-1, 1, (192, 64)).astype("float32")
    packed = [u.fixed_operand(1, w) for u in found.ukernels]
    assert all(np.array_equal(p, packed[0]) for p in packed)
    rows = config["tile_i"][-1]
    for h in lacking:
        derived = by_height[h]
        hw, cost = hardware_model(spec.target), op_cost(spec)
        assert derived.mean_s == pytest.approx(1e-4 * predict_time(hw, cost, h) / predict_time(hw, cost, heights[0]))
        if h >= rows:
            assert {k: v for k, v in derived.config.knobs.items() if k != "tile_i"} == \
                {k: v for k, v in config.knobs.items() if k != "tile_i"}
            assert derived.config["tile_i"][-1] == rows
    kernel = DynamicKernel(spec, found.ukernels)
    for m in (1, 3, 6, 17, 40, 200):
        x = rng.uniform(-1, 1, (m, 64)).astype("float32")
        np.testing.assert_allclose(kernel(x, w), x @ w.T, rtol=1e-4, atol=1e-4, err_msg=f"batch={m}")


def _causal_by_positions():
    """Attention under a causal mask made as transformers makes it: positions, `torch.diff` of them to find packed
    sequences (slices along the last dimension, of a symbolic size), their cumulative sum, comparisons."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            pos = torch.arange(x.shape[1]).unsqueeze(0)
            seq = (torch.diff(pos, dim=-1, prepend=pos[:, :1] - 1) != 1).cumsum(-1)
            mask = (seq[:, :, None] == seq[:, None, :]) & (pos[:, None, :] <= pos[:, :, None])
            scores = (x @ x.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
            return scores.softmax(-1) @ self.fc(x)

    return Net().eval()


def test_attention_with_a_mask_runs_its_masked_safe_softmax_as_one_kernel():
    """PyTorch's SDPA with a boolean mask exports as scores + a -inf mask, softmax, and a test that zeroes the rows
    masked everywhere (`_safe_softmax`): a dynamic build takes the four as one safe softmax of the scores and the
    mask (the mask read as it is, shared by the heads). It matches PyTorch at every length, a row with nothing to
    attend to included (zeros, not NaN)."""
    torch = pytest.importorskip("torch")
    from autotune.model.build import build_model

    class Net(torch.nn.Module):
        def forward(self, x, mask):
            q = x.reshape(1, x.shape[1], 2, 8).transpose(1, 2)
            return torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q + 1.0, attn_mask=mask)

    model = Net().eval()
    t = torch.export.Dim("t", min=1, max=64)
    example = (torch.randn(1, 5, 16), torch.ones(1, 1, 5, 5, dtype=torch.bool).tril())
    program = torch.export.export(model, example, dynamic_shapes={"x": {1: t}, "mask": {2: t, 3: t}})
    built = build_model(program, shipped=False)
    assert built.symbolic.get("dynamic_safe_softmax_bias") == 1 and "dynamic_softmax" not in built.symbolic, \
        built.symbolic
    for n in (1, 2, 13, 64):
        x, mask = torch.randn(1, n, 16), torch.ones(1, 1, n, n, dtype=torch.bool).tril()
        mask[..., n // 2, :] = False  # this query attends to nothing: zeros
        with torch.no_grad():
            want = model(x, mask).numpy()
        assert not np.isnan(want).any()
        np.testing.assert_allclose(built(x, mask), want, rtol=1e-4, atol=1e-4, err_msg=f"t={n}")


def test_a_mask_sliced_along_a_symbolic_size_builds_and_bad_inputs_are_one_line_errors(tmp_path):
    """Slices of a symbolic size that torch proves within their dimension import with its size (TVM's own
    converter clamps them into shapes Relax cannot compare, and its legalization takes no negative axis): the
    model builds and matches PyTorch at every length. Inputs outside what the model was exported for (a length
    beyond the range, a static size, a dtype, their number) are one-line errors before anything runs; the range
    is checked by the exported library too."""
    torch = pytest.importorskip("torch")
    from autotune.model import load_library
    from autotune.model.build import build_model

    torch.manual_seed(0)
    model = _causal_by_positions()
    t = torch.export.Dim("t", min=1, max=64)
    program = torch.export.export(model, (torch.randn(1, 5, 16),), dynamic_shapes={"x": {1: t}})
    built = build_model(program, shipped=False)
    for n in (1, 2, 13, 64):
        x = torch.randn(1, n, 16)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-4, err_msg=f"t={n}")
    wanted = "was exported for inputs x [1, s"
    for args, why in [((np.zeros((1, 65, 16), "float32"),), "= 65 is outside 1..64"),
                      ((np.zeros((1, 5, 15), "float32"),), "got [1, 5, 15] float32"),
                      ((np.zeros((1, 5, 16), "float64"),), "got [1, 5, 16] float64"),
                      ((), "got none")]:
        with pytest.raises(AutotuneError) as err:
            built(*args)
        assert wanted in str(err.value) and why in str(err.value) and "\n" not in str(err.value), str(err.value)
    built.export_library(tmp_path / "masked.so")
    library = load_library(tmp_path / "masked.so")
    x = torch.randn(1, 64, 16)
    with torch.no_grad():
        np.testing.assert_allclose(library(x), model(x).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(AutotuneError, match=r"^masked.so: x dimension 1 = 65 is outside its exported range 1\.\.64$"):
        library(torch.randn(1, 65, 16))
