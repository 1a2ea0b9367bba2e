"""aarch64 end to end without ARM hardware: kernels and a model cross-built here, run by TVM's RPC server on an
emulated aarch64 machine (qemu-user, `emulator/aarch64.sh`), every answer checked. Emulation times mean
nothing: these tests check the flow and the answers, never speed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autotune.cli import main
from autotune.errors import AutotuneError
from autotune.measure.rpc_services import start_tracker, stop, wait_for_servers
from autotune.records import load_records

pytestmark = pytest.mark.slow  # the emulator's set-up (packages, wheels) and emulated TVM: minutes

EMULATOR = Path(__file__).parent / "emulator" / "aarch64.sh"
KEY = "aarch64-emulated"
SESSION_S = "300"  # an emulated session imports nothing, but runs kernels some 10-50x slower


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """(tracker address, emulator root): TVM's RPC server on an emulated aarch64 machine, registered here."""
    logs = tmp_path_factory.mktemp("aarch64")
    done = subprocess.run(["bash", str(EMULATOR)], capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, f"emulator set-up failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    root = Path(done.stdout.strip().splitlines()[-1])
    port = _free_port()
    tracker = start_tracker("127.0.0.1", port, log=logs / "tracker.log")
    server_port = _free_port()
    with open(logs / "server.log", "ab") as log:
        server = subprocess.Popen(
            [str(root / "python"), "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
             "--port-end", str(server_port + 1), "--tracker", f"127.0.0.1:{port}", "--key", KEY],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "TVM_NUM_THREADS": "2"})
    try:
        deadline = time.monotonic() + 300
        while server.poll() is None and time.monotonic() < deadline:
            try:
                wait_for_servers("127.0.0.1", port, KEY, 1, timeout=5)
                break
            except AutotuneError:
                continue
        else:
            pytest.fail(f"the emulated RPC server did not register:\n{(logs / 'server.log').read_text()[-3000:]}")
        yield f"127.0.0.1:{port}", root
    finally:
        stop(server)
        stop(tracker)


@pytest.mark.parametrize("op,shape,tuner", [("matmul", "M=16,N=32,K=24", "random"),
                                            ("conv2d", "N=1,C=8,H=10,W=10,K=16,R=3,S=3,padding=1", "xgb")])
def test_tuning_for_aarch64_measures_on_the_emulated_device(emulated, tmp_path, capsys, op, shape, tuner):
    tracker, _ = emulated
    log = tmp_path / "arm.jsonl"
    assert main(["tune", op, "--shape", shape, "--target", "aarch64", "--trials", "3", "--tuner", tuner,
                 "--rpc-key", KEY, "--rpc-tracker", tracker, "--rpc-session-timeout", SESSION_S,
                 "--repeat", "1", "--min-repeat-ms", "0", "--retime", "0", "--log", str(log)]) == 0, \
        capsys.readouterr().err
    records = list(load_records(log))
    assert len(records) == 3 and all(r.result.ok for r in records), [r.result for r in records]
    assert all(r.task.target["mtriple"] == "aarch64-linux-gnu" for r in records)


def test_a_model_cross_built_for_aarch64_runs_on_the_emulated_device_equal_to_torch(emulated, tmp_path):
    """ResNet-18 (random weights), built here for aarch64 with default schedules, exported, and run by the
    emulated device's Relax VM over RPC: its output equals PyTorch's."""
    torch = pytest.importorskip("torch")
    import tvm
    from tvm import relax, rpc

    from autotune.model import build_model, capture

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from models import ResNet18

    tracker, _ = emulated
    torch.manual_seed(0)
    model = ResNet18().eval()
    x = torch.randn(1, 3, 224, 224)
    built = build_model(capture(model, (x,)), target="aarch64")
    built.export_library(tmp_path / "resnet18.so")
    host, port = tracker.split(":")
    remote = rpc.connect_tracker(host, int(port)).request(KEY, session_timeout=int(SESSION_S))
    remote.upload(str(tmp_path / "resnet18.so"))
    vm = relax.VirtualMachine(remote.load_module("resnet18.so"), remote.cpu())
    vm.set_input("main", tvm.runtime.tensor(x.numpy(), remote.cpu()))
    vm.invoke_stateful("main")  # its outputs fetched one by one: a tuple does not cross RPC
    got = vm.get_outputs("main")[0]
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_tune_model_and_build_for_aarch64_through_the_cli(emulated, tmp_path, capsys):
    """`tune-model` measures a model's tasks on the emulated device; `build` links an aarch64 library with them."""
    torch = pytest.importorskip("torch")
    from test_cross import EM_AARCH64, elf_machine

    tracker, _ = emulated
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 10)).eval()
    program = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 8, 8),)), program)
    log, out = tmp_path / "arm.jsonl", tmp_path / "net-arm.so"
    assert main(["tune-model", str(program), "--target", "aarch64", "--trials", "2", "--round-trials", "1",
                 "--tuner", "random", "--log", str(log), "--rpc-key", KEY, "--rpc-tracker", tracker,
                 "--rpc-session-timeout", SESSION_S, "--repeat", "1", "--min-repeat-ms", "0", "--retime", "0"]) == 0
    records = list(load_records(log))
    assert {r.task.op for r in records} == {"conv2d", "dense"} and all(r.result.ok for r in records), records
    assert main(["build", str(program), "--target", "aarch64", "--logs", str(log), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "2 of 2 tasks tuned from logs" in printed, printed
    assert elf_machine(out) == EM_AARCH64
