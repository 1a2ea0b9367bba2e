"""Training data from tuning records: feature rows, throughputs and a task group per row."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autotune.measure.types import MeasureResult
from autotune.database import TuningDatabase
from autotune.errors import AutotuneError
from autotune.records import Record, median_record
from autotune.templates import resolve, space_of

from .features import FeatureCache, extract, valid_rows
from .xgb_model import XGBCostModel

if TYPE_CHECKING:
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
    """(task key, template ref) -> config index -> its throughput as a config is scored (`median_record`: the
    median of its timings), 0 when any of its measurements failed. The records are of one version of each
    template (`TuningDatabase.records(current=True)`)."""
    grouped: dict[tuple[str, str], dict[int, list[Record]]] = {}
    for r in records:
        grouped.setdefault((r.task.key, r.input.template), {}).setdefault(r.input.config.index, []).append(r)
    return {key: {index: throughput(median_record(recs).result) if all(r.result.ok for r in recs) else 0.0
                  for index, recs in table.items()}
            for key, table in grouped.items()}


def records_dataset(records: Iterable[Record], features: str = "loop", max_per_task: int | None = None,
                    seed: int = 0, cache: FeatureCache | None = None, pool: FeaturePool | None = None) -> Dataset:
    """Features of every record whose template still exists at the version that made it (or one it declares
    compatible: the same config, scheduled as the template does now).

    `max_per_task` keeps that many configs per task: the best quarter, then a random sample of the rest.
    Knob features need all records to come from one template (rows of different templates do not line up).
    """
    db = records if isinstance(records, TuningDatabase) else TuningDatabase(records)
    records = db.records(current=True)
    templates = sorted({r.input.template for r in records})
    if features == "knob" and len(templates) > 1:
        raise AutotuneError(f"knob features need records of one template, and these are of {len(templates)} "
                            f"({', '.join(templates)}): use loop features, or give the logs of one template")
    stale = sorted({r.input.template for r in db if not db.is_current(r)})
    tasks = {r.task.key: r.task for r in records}
    rng = np.random.default_rng(seed)
    xs, ys, gs, keys = [], [], [], []
    for (task_key, ref), table in config_throughputs(records).items():
        template = resolve(ref)
        task = tasks[task_key]
        indices = sorted(table)
        if max_per_task is not None and len(indices) > max_per_task:
            indices = _subsample(indices, table, max_per_task, rng)
        X = extract(task, template, space_of(template, task), indices, features, cache, pool)
        ok = valid_rows(X)
        if task_key not in keys:
            keys.append(task_key)
        xs.append(X[ok])
        ys.append(np.array([table[i] for i in indices])[ok])
        gs.append(np.full(int(ok.sum()), keys.index(task_key)))
    if stale:
        warnings.warn(f"skipped records made by other versions of {', '.join(stale)} (or of templates that do not "
                      "import here)", stacklevel=2)
    if not xs:
        return Dataset(np.zeros((0, 0), np.float32), np.zeros(0), np.zeros(0, int), [])
    if len({x.shape[1] for x in xs}) > 1:
        raise AutotuneError(f"{features} features of these records have different lengths (records of "
                            f"{len({r.input.template for r in records})} templates); use loop features to train "
                            "on records of several templates")
    return Dataset(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs), keys)


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
        raise AutotuneError("no usable records to train on: none was made by a template of this version that "
                            "imports here with finite features; tune first, or give logs of this autotune")
    return XGBCostModel(objective=objective, features=features, seed=seed, **params).fit(data.X, data.y, data.groups)
