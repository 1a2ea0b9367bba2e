"""Model inputs that fail or that would run code: a factory or forward that fails is one line of error, and a
`.pt2` is read with pickling off (one holding a pickle is refused and its payload never runs)."""

from __future__ import annotations

import json
import pickle
import re
import zipfile

import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")

import autotune.cli as cli  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.model import extract_tasks  # noqa: E402
from autotune.model.capture import capture, load_program  # noqa: E402

MODELS = '''
import sys
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


class Raising(Net):
    def forward(self, x):
        raise ValueError("forward is broken\\nsecond line")


def raises():
    raise RuntimeError("factory is broken")


def wrong_inputs():
    return Net(), ("not a tensor",)


def forward_raises():
    return Raising(), (torch.randn(2, 8),)


def exits():
    sys.exit(3)
'''


class Payload:
    """Unpickling it writes the marker file: what a hostile pickle in a .pt2 could do instead."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("model_inputs")
    (d / "bad.py").write_text(MODELS)
    ok = d / "ok.pt2"
    torch.export.save(torch.export.export(Small(), (torch.randn(2, 8),)), ok)
    marker = d / "payload-ran"
    with zipfile.ZipFile(ok) as src, zipfile.ZipFile(d / "evil.pt2", "w") as out:
        for info in src.infolist():  # the first weight pickled, as a payload
            data = src.read(info.filename)
            if info.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                config["config"]["fc.weight"]["use_pickle"] = True
                data = json.dumps(config).encode()
            elif info.filename.endswith("data/weights/weight_0"):
                data = pickle.dumps(Payload(str(marker)))
            out.writestr(info.filename, data)
    return d


@pytest.mark.parametrize("factory, command, message", [
    ("raises", "extract", r"model .*bad.py:raises: raises\(\) raised RuntimeError: factory is broken$"),
    ("raises", "build", r"raises\(\) raised RuntimeError: factory is broken$"),
    ("raises", "tune-model", r"raises\(\) raised RuntimeError: factory is broken$"),
    ("exits", "extract", r"model .*bad.py:exits: exits\(\) raised SystemExit: 3$"),
    ("exits", "build", r"exits\(\) raised SystemExit: 3$"),
    ("wrong_inputs", "extract", r"wrong_inputs: example inputs must be tensors or arrays: TypeError: "),
    ("wrong_inputs", "build", r"wrong_inputs: example inputs must be tensors or arrays: TypeError: "),
    ("forward_raises", "extract", r"torch.export failed for .*forward_raises: ValueError: forward is broken; "
                                  r"through torch.compile: .*ValueError: forward is broken$"),
    ("forward_raises", "build", r"torch.export failed for .*forward_raises: ValueError: forward is broken$"),
])
def test_failing_model_code_is_one_line(files, tmp_path, capsys, factory, command, message):
    args = {"extract": [], "build": ["-o", str(tmp_path / "m.so")],
            "tune-model": ["--trials", "1", "--log", str(tmp_path / "l.jsonl")]}[command]
    assert cli.main([command, f"{files / 'bad.py'}:{factory}", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("autotune: error: "), err
    assert re.search(message, err.strip()), err
    assert not (tmp_path / "m.so").exists() and not (tmp_path / "l.jsonl").exists()


def test_pickled_pt2_is_refused_and_its_payload_never_runs(files, capsys):
    evil = files / "evil.pt2"
    for call in (lambda: load_program(evil), lambda: capture(str(evil)), lambda: extract_tasks(str(evil))):
        with pytest.raises(AutotuneError, match=r"holds a pickled weight 'fc.weight', which runs code when loaded; "
                                                r"if you trust the file, load it with --allow-pickle") as err:
            call()
        assert "\n" not in str(err.value)
    for command in (["extract"], ["build", "-o", str(files / "m.so")]):
        assert cli.main([*command, str(evil)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "--allow-pickle" in err, err
    assert not (files / "payload-ran").exists()


def test_allow_pickle_is_the_trusting_way(files):
    """With the flag the file is trusted: torch.export.load unpickles it (here: the payload runs)."""
    with pytest.raises(AutotuneError, match="cannot load exported program"):  # the payload is no tensor
        load_program(files / "evil.pt2", allow_pickle=True)
    assert (files / "payload-ran").exists()
    (files / "payload-ran").unlink()


def test_ordinary_pt2_still_loads(files, capsys):
    program = load_program(files / "ok.pt2")
    x = torch.randn(2, 8)
    assert torch.allclose(program.module()(x), torch.export.load(files / "ok.pt2").module()(x))
    assert cli.main(["extract", str(files / "ok.pt2")]) == 0
    assert "dense" in capsys.readouterr().out


def _evaluated_shape(data: bytes) -> bytes:
    """A model.json whose first tensor's first size is an expression that, evaluated, writes a file."""
    model = json.loads(data)
    values = model["graph_module"]["graph"]["tensor_values"]
    values[next(iter(values))]["sizes"][0] = {"as_expr": {
        "expr_str": "__import__('os').system('touch payload-ran') + s0", "hint": {"as_int": 2}}}
    return json.dumps(model).encode()


@pytest.mark.parametrize("change, reason", [
    (lambda name, data: (name, _evaluated_shape(data)) if name.endswith("models/model.json") else (name, data),
     "a shape expression that is not arithmetic"),
    (lambda name, data: (name, data) if not name.endswith("archive_version") else None, "no archive_version"),
    (lambda name, data: (name.replace("data/weights/weight_0", "data/aotinductor/model/x.so"), data),
     "an AOTInductor library"),
    (lambda name, data: (name.replace("data/weights/weight_0", "data/weights/model.pt"), data), "legacy .pt files"),
    (lambda name, data: (name, pickle.dumps(Payload("/nonexistent/x"))) if "sample_inputs" in name
     else (name, data), "sample inputs that only load with pickling on"),
])
def test_other_code_in_a_pt2_is_refused(files, tmp_path, monkeypatch, change, reason):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(files / "ok.pt2") as src, zipfile.ZipFile(bad, "w") as out:
        for info in src.infolist():
            changed = change(info.filename, src.read(info.filename))
            if changed is not None:
                out.writestr(*changed)
    with pytest.raises(AutotuneError, match=reason):
        load_program(bad)
    assert not (tmp_path / "payload-ran").exists()


def test_pt2_with_a_dynamic_shape_still_loads(tmp_path):
    class Doubling(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] * 2, -1) + 1

    half = torch.export.Dim("half", min=1, max=32)
    program = torch.export.export(Doubling(), (torch.randn(8, 4),), dynamic_shapes={"x": {0: 2 * half}})
    torch.export.save(program, tmp_path / "dynamic.pt2")
    loaded = load_program(tmp_path / "dynamic.pt2")
    assert loaded.module()(torch.ones(6, 4)).shape == (12, 2)


def test_pt2_that_is_no_archive_is_one_line(tmp_path):
    (tmp_path / "x.pt2").write_text("hello")
    with pytest.raises(AutotuneError, match="not a torch.export archive"):
        load_program(tmp_path / "x.pt2")
