"""Training data from tuning records: feature rows, throughputs and a task group per row."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autotune.measure_types import MeasureResult
from autotune.records import Record, best_record
from autotune.space import ConfigSpace
from autotune.task import Task

from .features import FeatureCache, extract, valid_rows
from .xgb_model import XGBCostModel

if TYPE_CHECKING:
    from search_spaces.base import Template

    from .feature_pool import FeaturePool


@dataclass(frozen=True)
class Dataset:
    """Rows with finite features; `groups[i]` indexes `task_keys`."""

    X: np.ndarray
    y: np.ndarray  # throughput 1/seconds, 0 for errors
    groups: np.ndarray
    task_keys: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.y)


def throughput(result: MeasureResult) -> float:
    """1 / mean seconds of a valid measurement, 0 for any error."""
    return 1.0 / result.mean_s if result.ok and result.mean_s > 0 else 0.0


def config_throughputs(records: Iterable[Record]) -> dict[tuple[str, str], dict[int, float]]:
    """(task key, template ref) -> config index -> its throughput as `best_record` scores a config: the
    median of its timings, 0 when any of its measurements failed."""
    grouped: dict[tuple[str, str], dict[int, list[Record]]] = {}
    for r in records:
        grouped.setdefault((r.task.key, r.input.template), {}).setdefault(r.input.config.index, []).append(r)
    return {key: {index: throughput(best.result) if (best := best_record(recs)) is not None else 0.0
                  for index, recs in table.items()}
            for key, table in grouped.items()}


def records_dataset(records: Iterable[Record], features: str = "loop", max_per_task: int | None = None,
                    seed: int = 0, cache: FeatureCache | None = None, pool: FeaturePool | None = None) -> Dataset:
    """Features of every record whose template still exists at the version that made it (or one it declares
    compatible: the same config, scheduled as the template does now).

    `max_per_task` keeps that many configs per task: the best quarter, then a random sample of the rest.
    Knob features need all records to come from one template (rows of different templates do not line up).
    """
    import search_spaces

    records = list(records)
    tasks = {r.task.key: r.task for r in records}
    versions = {(r.task.key, r.input.template): r.template_version for r in records}
    rng = np.random.default_rng(seed)
    xs, ys, gs, keys = [], [], [], []
    stale: set[str] = set()
    for (task_key, ref), table in config_throughputs(records).items():
        try:
            template = search_spaces.resolve(ref)
        except Exception as err:  # noqa: BLE001 - a template that cannot be imported here: skip its records
            warnings.warn(f"skipping records of {ref}: {err}", stacklevel=2)
            continue
        if not template.reads_records_of(versions[(task_key, ref)]):
            stale.add(ref)
            continue
        task = tasks[task_key]
        indices = sorted(table)
        if max_per_task is not None and len(indices) > max_per_task:
            indices = _subsample(indices, table, max_per_task, rng)
        X = extract(task, template, task_space(task, template), indices, features, cache, pool)
        ok = valid_rows(X)
        if task_key not in keys:
            keys.append(task_key)
        xs.append(X[ok])
        ys.append(np.array([table[i] for i in indices])[ok])
        gs.append(np.full(int(ok.sum()), keys.index(task_key)))
    if stale:
        warnings.warn(f"skipped records made by other versions of {', '.join(sorted(stale))}", stacklevel=2)
    if not xs:
        return Dataset(np.zeros((0, 0), np.float32), np.zeros(0), np.zeros(0, int), [])
    if len({x.shape[1] for x in xs}) > 1:
        raise ValueError(f"{features} features of these records have different lengths; use loop features "
                         "to train on records of several templates")
    return Dataset(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs), keys)


_SPACES: dict[tuple[str, str, str], ConfigSpace] = {}  # (task, template name, version) -> space


def task_space(task: Task, template: Template) -> ConfigSpace:
    """The template's space for a task (cached: define_space may enumerate many factorisations)."""
    key = (task.key, template.name, template.version)
    if key not in _SPACES:
        _SPACES[key] = template.define_space(task)
    return _SPACES[key]


def _subsample(indices: list[int], table: dict[int, float], n: int, rng: np.random.Generator) -> list[int]:
    ranked = sorted(indices, key=lambda i: -table[i])
    top = ranked[: n // 4]
    rest = ranked[n // 4:]
    pick = rng.choice(len(rest), size=n - len(top), replace=False)
    return sorted(top + [rest[i] for i in pick])


def train_from_records(records: Iterable[Record], features: str = "loop", objective: str = "rank",
                       max_per_task: int | None = None, seed: int = 0, **params) -> XGBCostModel:
    """Fit a cost model on tuning logs (e.g. for `autotune train-model LOGS -o model.json`)."""
    data = records_dataset(records, features, max_per_task, seed)
    if len(data) == 0:
        raise ValueError("no usable records to train on")
    return XGBCostModel(objective=objective, features=features, seed=seed, **params).fit(data.X, data.y, data.groups)
