import json
import subprocess
import sys

import pytest

from autotune.cli import main

from conftest import TINY, UNHURRIED_CLI


def _run(*args):
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,needle", [
    (["tune", "conv3d", "--shape", "N=1"], "unknown operator 'conv3d'; choose one of: matmul, dense"),
    (["tune", "matmul", "--shape", "M=4,N=4"], "missing parameter(s) K"),
    (["tune", "matmul", "--shape", "M=4,N=4,K=4,Z=1"], "unknown parameter(s) Z"),
    (["tune", "matmul", "--shape", "M=-4,N=4,K=4"], "impossible shape"),
    (["tune", "matmul", "--shape", "M=4,N=4,K=4", "--target", "opencl"], "unknown target 'opencl'"),
    pytest.param(["tune", "matmul", "--shape", "M=4,N=4,K=4", "--tuner", "genetic"], "unknown tuner 'genetic'",
                 marks=pytest.mark.slow),  # found after TVM is imported: seconds
    (["tune", "matmul", "--shape", "M=4,N=4,K=4", "--cold-start", "analytic"], "invalid choice: 'analytic'"),
    (["show", "/nonexistent/log.jsonl"], "does not exist"),
    (["tune", "matmul", "--shape", "M=4,N=4,K=4", "--seed", "-1"], "--seed: must be >= 0, not -1"),
    (["tune", "matmul", "--shape", "M=64,M=32,N=4,K=4"], "M is given twice"),
    (["best", "/"], "not a file"),
])
def test_bad_input_exits_with_one_line(args, needle):
    r = _run(*args)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a real tuning run (the default tier's: test_tune, and test_dynamic's through the CLI)
def test_tune_show_best(tmp_path, capsys, worker_env):
    log = tmp_path / "l.jsonl"
    code = main(["tune", "matmul", "--shape", "M=32,N=32,K=32", "--trials", "4", "--tuner", "random",
                 "--template", TINY, "--log", str(log), "--quiet", *UNHURRIED_CLI])
    out = capsys.readouterr().out
    lines = len(log.read_text().splitlines())  # 4 trials, then the best configs timed twice more (--retime 2)
    assert code == 0 and "GFLOPS" in out and "4 trials" in out and 4 + 2 <= lines <= 4 + 2 * 8
    with log.open("a") as fh:
        fh.write("{corrupt\n")
    assert main(["show", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"{lines} records, 1 corrupt lines skipped" in out and f"records={lines} configs=4 valid={lines}" in out
    assert main(["best", str(log), "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    assert {"task_key", "op", "params", "target", "config", "mean_s", "gflops", "timings"} <= set(row)
    assert row["params"] == {"M": 32, "N": 32, "K": 32} and row["gflops"] > 0 and row["target"]["num-cores"] >= 1
    best_log = tmp_path / "best.jsonl"
    best_log.write_text("an older file, replaced whole\n")
    assert main(["best", str(log), "--json", "-o", str(best_log)]) == 0
    assert json.loads(capsys.readouterr().out.strip()) == row  # the distilled log has the same best
    assert main(["best", str(best_log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip()) == row
    kept = [json.loads(line) for line in best_log.read_text().splitlines()]
    assert len(kept) == row["timings"] and {k["config"]["index"] for k in kept} == {row["config"]["index"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.jsonl", "l.jsonl"]  # no temporary file left
    r = _run("best", str(log), "-o", str(log))
    assert r.returncode == 2 and "one of the logs read" in r.stderr and len(log.read_text().splitlines()) == lines + 1


@pytest.mark.slow  # builds 12 CUDA kernels
def test_cuda_without_gpu_says_so_and_build_only_counts(tmp_path):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("a CUDA device is present: the no-GPU message does not apply")
    shape = "M=256,N=256,K=256"
    r = _run("tune", "matmul", "--shape", shape, "--target", "cuda", "--log", str(tmp_path / "x.jsonl"))
    assert r.returncode == 2 and "no CUDA device is available" in r.stderr and "--build-only" in r.stderr
    assert not (tmp_path / "x.jsonl").exists()
    r = _run("tune", "matmul", "--shape", shape, "--target", "cuda", "--arch", "sm_90", "--build-only",
             "--trials", "12")
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[0]
    proposed, valid, invalid, built = (int(x) for x in
                                       __import__("re").findall(r"(\d+) (?:candidates|valid|invalid|built)", line))
    assert valid == 12 and valid + invalid == proposed and built == valid
