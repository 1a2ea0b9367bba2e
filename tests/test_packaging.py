"""The wheel holds every package of the source tree and its data, under the version the code reports."""

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import autotune

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("autotune", "search_spaces", "cost_models")


def source_packages() -> set[str]:
    """Every directory holding Python modules under the top-level packages, as a dotted name."""
    return {".".join(p.parent.relative_to(ROOT).parts) for top in TOP_LEVEL for p in (ROOT / top).rglob("*.py")
            if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools")
    # from a copy: setuptools reuses a build/ folder in the tree, whose stale files would hide a missing package
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in TOP_LEVEL:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("autotune-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_the_wheel_holds_every_package_directory(wheel):
    in_wheel = {str(Path(n).parent).replace("/", ".") for n in wheel.namelist() if n.endswith(".py")}
    missing = sorted(source_packages() - in_wheel)
    assert not missing, f"package directories missing from the wheel: {missing}"
    assert {"autotune.model", "autotune.dynamic", "autotune.tuners", "autotune.schemas"} <= in_wheel


def test_the_wheel_holds_package_data_entry_points_and_the_version(wheel):
    names = wheel.namelist()
    assert "autotune/schemas/record.schema.json" in names
    shipped = sorted(p.name for p in (ROOT / "autotune" / "shipped").glob("*.json*"))  # configs, cost models
    assert [n for n in shipped if f"autotune/shipped/{n}" not in names] == []  # the shipped knowledge, all of it
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert re.search(rf"^Version: {re.escape(autotune.__version__)}$", wheel.read(meta).decode(), re.M)
    entry_points = wheel.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "autotune = autotune.cli:main" in entry_points
    assert "autotune = autotune.torch_backend:autotune_backend" in entry_points
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/", "recipes/"))]
