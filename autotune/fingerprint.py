"""A template's version: a fingerprint of its spaces and schedules on its operator's probe shapes.

Records made by other code are told apart (an edited template changes what an index means), while a refactor
that leaves every schedule as it was keeps the logs usable. Computed once per source text of the template and
cached on disk.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .operators import OPS
from .space import Config, ConfigSpace
from .task import Task, make_task

# target kind -> the targets a template is fingerprinted on (a CPU space's vector tiles and register cap follow
# the target's vector unit: AVX-512 and AVX2 both probed)
PROBE_TARGETS = {"llvm": ({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2},
                          {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}),
                 "cuda": ({"kind": "cuda", "arch": "sm_80"},)}
# a template that schedules other dtypes than float32 is probed on them too, on targets with their instructions
# (AVX-512 VNNI and BF16 dot products; AMX tiles too; tensor cores)
NARROW_PROBE_TARGETS = {"llvm": ({"kind": "llvm", "mcpu": "cooperlake", "num-cores": 2},
                                 {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}),
                        "cuda": ({"kind": "cuda", "arch": "sm_80"},)}
PROBE_CONFIGS = 6  # configs per probe task, spread over the space
FINGERPRINT_FORMAT = "4"  # 2: probed on an AVX2 target as well; 3: and on its other dtypes; 4: on CUDA too


class Fingerprinted(Protocol):
    """What a fingerprint reads of a template (`autotune.templates.Template`)."""

    op: str
    target_kind: str
    source_hash: str
    define_space: Callable[[Task], ConfigSpace]
    apply: Callable[[Task, Config], Any]
    dtypes: tuple[str, ...]


def _cache_file() -> Path:
    root = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root) / "template_versions.json"


def schedule_fingerprint(template: Fingerprinted) -> str:
    """Hash of the knob candidates and the scheduled TIR of a few configs on the op's probe tasks
    (`OpDef.probe_shapes`, on `PROBE_TARGETS`).

    Falls back to the source hash for an op without probe shapes. Cached on disk by source hash,
    so the schedules are built once per edit of the template's code, not once per process.
    """
    key = f"{FINGERPRINT_FORMAT}:{template.source_hash}"
    path = _cache_file()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    op = OPS.get(template.op)
    if op is None or not op.probe_shapes or template.target_kind not in PROBE_TARGETS:
        return template.source_hash
    version = compute_fingerprint(template)
    try:  # a read-only home only costs recomputing next time
        path.parent.mkdir(parents=True, exist_ok=True)
        cache[key] = version
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
    return version


def compute_fingerprint(template: Fingerprinted) -> str:
    """The fingerprint itself, uncached."""
    digest = hashlib.sha1(f"{template.op}:{template.target_kind}".encode())
    shapes = OPS[template.op].probe_shapes
    probes = [(target, shape, "float32") for target, shape in itertools.product(PROBE_TARGETS[template.target_kind],
                                                                                shapes)]
    narrow = shapes + OPS[template.op].narrow_probe_shapes
    probes += [(target, shape, dtype) for dtype in template.dtypes if dtype != "float32"
               for target, shape in itertools.product(NARROW_PROBE_TARGETS.get(template.target_kind, ()), narrow)]
    for target, shape, dtype in probes:
        task = make_task(template.op, shape, dtype, target=target)
        try:
            space = template.define_space(task)
        except Exception as err:  # noqa: BLE001 - a template for other shapes only: that is what it does
            digest.update(f"no space: {type(err).__name__}".encode())
            continue
        digest.update(repr([(k.name, k.kind, k.candidates) for k in space.knobs]).encode())
        n = len(space)
        for index in sorted({(n - 1) * i // (PROBE_CONFIGS - 1) for i in range(PROBE_CONFIGS)} | {n // 3 + 1}):
            index = min(index, n - 1)
            try:
                text = template.apply(task, space.get(index)).mod.script()
            except Exception as err:  # noqa: BLE001 - a rejected config is part of what the template does
                text = f"rejected: {type(err).__name__}"
            digest.update(f"{index}:{text}".encode())
    return digest.hexdigest()[:12]
