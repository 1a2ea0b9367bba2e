"""What a user is told about the machine and about failures: GPU facts, record versions, build failure reasons."""

import json

import pytest

from autotune.measure.build_check import build_only
from autotune.gpu import parse_gpu
from autotune.measure.types import ErrorKind, MeasureResult, error_summary, failure_reason
from autotune.records import load_records
from autotune.target import DEFAULT_CUDA_ARCH, parse_target
from autotune.task import make_task
from autotune.tune import tune
from conftest import FakeBuilder, SimulatedRunner

SMI_QUERY = "NVIDIA H200, 570.124.06, 9.0\n"
SMI_BANNER = "| NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8     |\n"


def test_nvidia_smi_output_gives_model_driver_cuda_and_arch():
    assert parse_gpu(SMI_QUERY, SMI_BANNER) == {"gpu": "NVIDIA H200", "gpu_driver": "570.124.06", "cuda": "12.8",
                                                "arch": "sm_90"}
    assert parse_gpu("", SMI_BANNER) is None
    assert parse_gpu("No devices were found\n", "") is None


def test_cuda_arch_defaults_to_the_local_gpu(monkeypatch):
    import autotune.gpu as gpu

    monkeypatch.setattr(gpu, "local_gpu", lambda: parse_gpu("NVIDIA A100-SXM4-80GB, 550.54, 8.0", ""))
    assert parse_target("cuda")["arch"] == "sm_80"
    assert parse_target("cuda", arch="sm_90")["arch"] == "sm_90"  # an explicit arch wins
    monkeypatch.setattr(gpu, "local_gpu", lambda: None)
    assert parse_target("cuda")["arch"] == DEFAULT_CUDA_ARCH


def test_every_record_names_llvm_and_xgboost_and_a_cuda_record_its_gpu(tmp_path):
    cpu_log, gpu_log = tmp_path / "cpu.jsonl", tmp_path / "gpu.jsonl"
    cpu = make_task("matmul", {"M": 64, "N": 64, "K": 64})
    gpu = make_task("matmul", {"M": 64, "N": 64, "K": 64}, target={"kind": "cuda", "arch": "sm_80"})
    for task, log in ((cpu, cpu_log), (gpu, gpu_log)):
        tune(task, trials=2, tuner="random", log=log, builder=FakeBuilder(), runner=SimulatedRunner(lambda c: 1e-3))
    for line in cpu_log.read_text().splitlines():
        versions = json.loads(line)["versions"]
        assert versions["llvm"].isdigit() and versions["xgboost"] and versions["tvm"] and "gpu" not in versions
    records = load_records(gpu_log)
    assert len(records) >= 2 and all(r.versions["gpu"] == "simulated" for r in records)


def test_failure_reasons_name_the_error_line_and_count_equal_causes_together():
    msg = ("RuntimeError: /usr/bin/ld: /tmp/tmpab12/lib0.o: Relocations in generic ELF (EM: 183)\n"
           "/usr/bin/ld: /tmp/tmpab12/lib0.o: error adding symbols: file in wrong format\n"
           "collect2: error: ld returned 1 exit status")
    assert failure_reason(msg) == "/usr/bin/ld: libN.o: error adding symbols: file in wrong format"
    results = [MeasureResult(None, ErrorKind.COMPILE_ERROR, msg.replace("tmpab12", f"tmp{i}"), 0.0, 0.0)
               for i in range(3)]
    results.append(MeasureResult(None, ErrorKind.RUN_TIMEOUT, "timed out after 10 s", 0.0, 0.0))
    results.append(MeasureResult((1e-3,), None, "", 0.0, 0.0))
    assert error_summary(results) == ["3 x compile_error: /usr/bin/ld: libN.o: error adding symbols: file in wrong "
                                      "format", "1 x run_timeout: timed out after N s"]


@pytest.mark.slow  # a builder worker importing TVM; failure reasons: test_failure_reasons_name_the_error_line_...
def test_build_only_for_a_target_this_host_cannot_link_says_why():
    """RISC-V (CI installs an aarch64 cross compiler, which links aarch64 kernels)."""
    import shutil

    from autotune.operators import default_template_ref

    if shutil.which("riscv64-linux-gnu-g++"):
        pytest.skip("this host has a RISC-V cross compiler")
    task = make_task("matmul", {"M": 32, "N": 32, "K": 32},
                     target={"kind": "llvm", "mtriple": "riscv64-linux-gnu", "mcpu": "generic-rv64"})
    report = build_only(task, 1, default_template_ref("matmul", "llvm"))
    assert report.compile_errors == 1 and report.built == 0
    assert "failed to build: 1 x compile_error:" in report.summary()
    assert "no C++ cross compiler for riscv" in report.summary()
