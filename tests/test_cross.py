"""Cross targets: an ARM CPU (aarch64) built on this machine, linked by a cross toolchain, refused where it
cannot run."""

from __future__ import annotations

import shutil
import struct

import pytest

from autotune.cli import main
from autotune.errors import AutotuneError
from autotune.hardware import cpu_model
from autotune.target import CROSS_CC_ENV, cross_compiler, is_cross, parse_target, vector_unit

AARCH64_CC = "aarch64-linux-gnu-g++"
needs_cross_cc = pytest.mark.skipif(shutil.which(AARCH64_CC) is None,
                                    reason=f"no {AARCH64_CC} (Debian: apt-get install g++-aarch64-linux-gnu)")
EM_AARCH64 = 183  # ELF e_machine


def elf_machine(path) -> int:
    """The ELF header's e_machine of a shared library (little-endian)."""
    with open(path, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF", "not an ELF file"
    return struct.unpack("<H", head[18:20])[0]


def test_aarch64_is_a_cross_target_with_neon_vectors():
    target = parse_target("aarch64")
    assert target["mtriple"] == "aarch64-linux-gnu" and target["mcpu"] == "generic" and target["num-cores"] == 4
    assert is_cross(target) and not is_cross(parse_target("llvm"))
    assert vector_unit(target) == (4, 32)  # NEON: 4 fp32 lanes, 32 registers
    model = cpu_model(target)
    assert (model.lanes, model.vector_registers, model.cores) == (4, 32, 4)
    core = parse_target('{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1", "num-cores": 8}')
    assert core["mcpu"] == "neoverse-n1" and core["num-cores"] == 8 and "mattr" not in core
    with pytest.raises(AutotuneError, match="no CPU 'neoverse-x9'.*neoverse-n1"):
        parse_target('{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-x9"}')


def test_a_missing_cross_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(CROSS_CC_ENV, raising=False)
    with pytest.raises(AutotuneError, match="apt-get install g\\+\\+-aarch64-linux-gnu"):
        cross_compiler(parse_target("aarch64"))
    monkeypatch.setenv(CROSS_CC_ENV, "no-such-g++")
    with pytest.raises(AutotuneError, match="no-such-g\\+\\+"):
        cross_compiler(parse_target("aarch64"))
    assert cross_compiler(parse_target("llvm")) is None


def test_tuning_a_cross_target_without_rpc_is_refused(capsys):
    # a compiler named with --cc (any: nothing is linked before the refusal), so that the check runs without one
    assert main(["tune", "dense", "--shape", "batch=4,in_features=16,out_features=16", "--target", "aarch64",
                 "--trials", "1", "--cc", shutil.which(AARCH64_CC) or "g++"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "aarch64 kernels cannot run on this" in err and "--build-only" in err, err


def test_build_only_counts_build_failures_by_their_reason(capsys):
    """This machine's g++ cannot link aarch64 objects: each failure's reason is printed, counted."""
    conv = ["tune", "conv2d", "--shape", "N=1,C=8,H=8,W=8,K=16,R=3,S=3,padding=1", "--target", "aarch64"]
    assert main([*conv, "--trials", "1", "--build-only", "--cc", "g++"]) == 1
    out = capsys.readouterr().out
    assert "0 built, 1 failed to build" in out and "failed to build: 1 x compile_error: " in out, out
    assert "file in wrong format" in out or "incompatible" in out, out


def test_a_cross_target_without_its_toolchain_stops_before_any_work(capsys):
    conv = ["tune", "conv2d", "--shape", "N=1,C=8,H=8,W=8,K=16,R=3,S=3,padding=1", "--target", "aarch64"]
    assert main([*conv, "--trials", "2", "--build-only", "--cc", "no-such-g++"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-g++" in err and "is not an executable" in err, err


@needs_cross_cc
def test_build_only_builds_aarch64_conv2d_here(tmp_path, capsys):
    assert main(["tune", "conv2d", "--shape", "N=1,C=8,H=8,W=8,K=16,R=3,S=3,padding=1", "--target", "aarch64",
                 "--trials", "2", "--build-only"]) == 0
    out = capsys.readouterr().out
    assert "2 built, 0 failed to build" in out, out


@needs_cross_cc
def test_a_model_cross_built_for_aarch64_exports_an_arm_library(tmp_path):
    torch = pytest.importorskip("torch")
    from autotune.model import build_model, capture

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    built = build_model(capture(model, (torch.randn(1, 3, 8, 8),)), target="aarch64")
    built.export_library(tmp_path / "model.so")
    assert elf_machine(tmp_path / "model.so") == EM_AARCH64
    with pytest.raises(AutotuneError, match="built for aarch64"):
        built(torch.randn(1, 3, 8, 8))
