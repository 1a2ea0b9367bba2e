"""The tuning log: one JSON object per line, appended and flushed per record.

A crash, Ctrl-C or kill -9 can at worst leave one partial last line; the writer starts a
new line after it, and the reader skips it with a warning and a count.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .errors import AutotuneError
from .measure.types import ErrorKind, MeasureInput, MeasureResult
from .space import Config
from .task import Task

LOG_FORMAT = 1


@dataclass(frozen=True)
class RetimePolicy:
    """Which configs are contenders for the best and how often they are timed again (`autotune.retime`).

    share: a contender was first measured at `share` or more of the best first measurement's throughput;
    top: at most this many contenders, the best first measurements; rounds: re-timings of each contender after
    the last trial (with its first timing, a median of rounds + 1).
    """

    share: float = 0.9
    top: int = 8
    rounds: int = 2


RETIME = RetimePolicy()  # the policy of `autotune tune`, `tune-model` and of every reader of the logs


@dataclass(frozen=True)
class Record:
    input: MeasureInput
    result: MeasureResult
    template_version: str
    threads: int
    versions: dict[str, str] = field(hash=False, compare=False)
    timing: str = "warm"  # "warm" (operands cached) or "flushed" (operands after the first flushed before each call)

    @property
    def task(self) -> Task:
        return self.input.task

    def gflops(self) -> float:
        return self.task.flops / self.result.mean_s / 1e9 if self.result.ok else 0.0

    def to_json(self) -> str:
        res = self.result
        result: dict[str, Any] = ({"costs": list(res.costs)} if res.ok
                                  else {"error": res.error.value, "message": res.message})
        result.update(build_s=round(res.build_s, 4), timestamp=res.timestamp)
        return json.dumps({
            "format": LOG_FORMAT,
            "task_key": self.task.key,
            "task": self.task.to_dict(),
            "template": {"ref": self.input.template, "version": self.template_version},
            "config": self.input.config.to_dict(),
            "result": result,
            "threads": self.threads,
            "timing": self.timing,
            "versions": self.versions,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Record:
        d = json.loads(line)
        task = Task.from_dict(d["task"])
        cfg = d["config"]
        knobs = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg["knobs"].items()}
        r = d["result"]
        if "costs" in r:
            result = MeasureResult(tuple(float(c) for c in r["costs"]), None, "", r.get("build_s", 0.0), r["timestamp"])
        else:
            result = MeasureResult(None, ErrorKind(r["error"]), r.get("message", ""), r.get("build_s", 0.0),
                                   r["timestamp"])
        return cls(MeasureInput(task, Config(int(cfg["index"]), knobs), d["template"]["ref"]), result,
                   d["template"]["version"], int(d.get("threads", 0)), d.get("versions", {}),
                   _timing(d.get("timing", "warm")))


TIMINGS = {"warm": "warm", "flushed": "with the cache flushed"}  # a record's `timing`, in words


def _timing(value: Any) -> str:
    if value not in TIMINGS:
        raise ValueError(f"timing {value!r} is not one of {', '.join(TIMINGS)}")
    return value


@dataclass
class LogReadStats:
    records: int = 0
    skipped: int = 0


def iter_records(path: str | os.PathLike, stats: LogReadStats | None = None) -> Iterator[Record]:
    """Records of a log, in order; corrupt or truncated lines are skipped and counted."""
    stats = stats if stats is not None else LogReadStats()
    p = Path(path)
    try:
        fh = p.open("r", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as err:
        raise AutotuneError(f"cannot read log {p}: {err.strerror}") from None
    skipped, first = 0, ""
    try:
        with fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = Record.from_json(line)
                except Exception as err:  # any malformed line: skip it, never fail on it
                    skipped += 1
                    stats.skipped += 1
                    first = first or f"line {lineno}: {type(err).__name__}: {str(err)[:120]}"
                    continue
                stats.records += 1
                yield rec
    finally:  # one warning per log, also when the reader stops early
        if skipped:
            warnings.warn(f"{p}: skipped {skipped} corrupt record{'s' * (skipped > 1)} (first at {first})",
                          stacklevel=2)


def load_records(paths: str | os.PathLike | Iterable[str | os.PathLike],
                 stats: LogReadStats | None = None) -> list[Record]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Record] = []
    for p in paths:
        if Path(p).is_dir():
            raise AutotuneError(f"{p} is a directory, not a log file")
        out.extend(iter_records(p, stats))
    return out


class LogWriter:
    """Appends records; each line is written whole and flushed (and fsynced) before the next."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fh = self.path.open("ab")
        # A previous run killed mid-write may have left a partial line: never glue onto it.
        if self._fh.tell() > 0:
            with self.path.open("rb") as rfh:
                rfh.seek(-1, os.SEEK_END)
                if rfh.read(1) != b"\n":
                    self._fh.write(b"\n")

    def write(self, record: Record) -> None:
        self._fh.write(record.to_json().encode() + b"\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_log(path: str | os.PathLike, records: Iterable[Record]) -> None:
    """Write `records` as a new log at `path`, replacing any file there only once all of them are written (a
    temporary file beside it, fsynced, then renamed over it): an interrupted write leaves the old file whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        with LogWriter(tmp) as writer:
            for r in records:
                writer.write(r)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def config_key(record: Record) -> tuple[str, str, str, int]:
    """What identifies one config's kernel: task, template at its version, config index."""
    return record.task.key, record.input.template, record.template_version, record.input.config.index


def split_retimes(records: Iterable[Record]) -> tuple[list[Record], list[Record]]:
    """(trials, re-timings): a config's first record is its trial, its later records time it again."""
    trials: list[Record] = []
    retimes: list[Record] = []
    seen: set[tuple[str, str, str, int]] = set()
    for r in records:
        key = config_key(r)
        (retimes if key in seen else trials).append(r)
        seen.add(key)
    return trials, retimes


def contenders(trials: list[Record], policy: RetimePolicy = RETIME) -> list[Record]:
    """The valid trials first measured within `policy.share` of the best one's throughput (at most `policy.top`),
    fastest first."""
    valid = sorted((r for r in trials if r.result.ok), key=lambda r: r.result.mean_s)
    if not valid:
        return []
    bound = valid[0].result.mean_s / policy.share
    return [r for r in valid[:policy.top] if r.result.mean_s <= bound]


def best_record(records: Iterable[Record], policy: RetimePolicy = RETIME) -> Record | None:
    """The record of the fastest config among the contenders (`contenders`: the configs whose first timing is
    within `policy.share` of the best first timing, the ones `autotune.retime` times again), each scored by the
    median of its timings (the slower middle one of an even count): one lucky timing does not make a config
    best, and a config first timed outside that share never outranks a contender on a single timing taken at
    another moment (this machine's speed changed 2x between a run's trials and its re-timings once).
    A config with any failed measurement (WRONG_ANSWER or any other error) never counts."""
    timings: dict[tuple[str, str, str, int], list[Record]] = {}
    failed: set[tuple[str, str, str, int]] = set()
    for r in records:
        if r.result.ok:
            timings.setdefault(config_key(r), []).append(r)
        else:
            failed.add(config_key(r))
    firsts = contenders([recs[0] for key, recs in timings.items() if key not in failed], policy)
    medians = [median_record(timings[config_key(f)]) for f in firsts]
    return min(medians, key=lambda r: r.result.mean_s) if medians else None


def median_record(timings: Sequence[Record]) -> Record:
    """The record of the median timing among valid `timings` of one config (the slower middle one of an even
    count): how a config is scored."""
    return sorted(timings, key=lambda r: r.result.mean_s)[len(timings) // 2]


def by_task(records: Iterable[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r.task.key, []).append(r)
    return out
