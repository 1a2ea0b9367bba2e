"""The tuning log: one JSON object per line, appended and flushed per record.

A crash, Ctrl-C or kill -9 can at worst leave one partial last line; the writer starts a
new line after it, and the reader skips it with a warning and a count.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .errors import AutotuneError
from .files import check_log_path, is_regular_file, replace_file
from .measure.types import ErrorKind, MeasureInput, MeasureResult
from .space import Config
from .task import Task

LOG_FORMAT = 1


@dataclass(frozen=True)
class RetimePolicy:
    """Which configs are contenders for the best and how often they are timed again (`autotune.retime`).

    share: a contender was first measured at `share` or more of the best first measurement's throughput;
    top: at most this many contenders, the best first measurements, and at most one per `trials_per_contender`
    valid trials of the task (at least 2): a task of a few trials, as each of a model's many tasks gets on a small
    budget, would otherwise spend more on re-timing than on its search; rounds: re-timings of each contender after
    the last trial (with its first timing, a median of rounds + 1).
    """

    share: float = 0.9
    top: int = 8
    trials_per_contender: int = 4
    rounds: int = 2

    def most(self, valid_trials: int) -> int:
        """How many contenders a task of `valid_trials` valid first measurements may have."""
        return min(self.top, max(2, valid_trials // self.trials_per_contender))


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
        """The record of one log line; ValueError (or another exception of a malformed line) for a line that
        breaks autotune/schemas/record.schema.json, checked by hand (reading a log stays fast)."""
        d = json.loads(line)
        _check(isinstance(d, dict), "not a JSON object")
        _check(d.get("format", LOG_FORMAT) == LOG_FORMAT, f"format {d.get('format')!r} is not {LOG_FORMAT}")
        t = d["task"]
        _check(isinstance(t, dict) and isinstance(t.get("params"), dict), "task.params is not an object")
        for name, value in t["params"].items():
            _check(_is_int(value), f"shape parameter {name}={value!r} is not an integer")
        task = Task.from_dict(t)
        cfg = d["config"]
        _check(_is_int(cfg["index"]) and cfg["index"] >= 0, f"config index {cfg['index']!r} is not an integer >= 0")
        _check(isinstance(cfg["knobs"], dict), "config.knobs is not an object")
        for name, v in cfg["knobs"].items():
            _check(isinstance(v, (int, str)) or (isinstance(v, list) and all(map(_is_int, v))),
                   f"knob {name}={v!r} is not an integer, string, boolean or list of integers")
        knobs = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg["knobs"].items()}
        ref, version = d["template"]["ref"], d["template"]["version"]
        _check(isinstance(ref, str) and _TEMPLATE_REF.fullmatch(ref) is not None, f"template ref {ref!r} is not "
               "module:attribute")
        _check(isinstance(version, str), "template version is not a string")
        r = d["result"]
        _check(isinstance(r, dict) and ("costs" in r) != ("error" in r), "result holds neither or both of costs "
               "and error")
        build_s, stamp = r.get("build_s", 0.0), r["timestamp"]
        _check(_is_number(build_s) and build_s >= 0, f"build_s {build_s!r} is not a number >= 0")
        _check(_is_number(stamp), f"timestamp {stamp!r} is not a finite number")
        if "costs" in r:
            costs = r["costs"]
            _check(isinstance(costs, list) and costs and all(_is_number(c) and c > 0 for c in costs),
                   f"costs {str(costs)[:40]} are not one or more finite numbers > 0")
            result = MeasureResult(tuple(float(c) for c in costs), None, "", float(build_s), float(stamp))
            _check(math.isfinite(task.flops / result.mean_s), f"costs {str(costs)[:40]} are not a measurable time")
        else:
            message = r.get("message", "")
            _check(isinstance(message, str), "result message is not a string")
            result = MeasureResult(None, ErrorKind(r["error"]), message, float(build_s), float(stamp))
        threads, versions = d.get("threads", 0), d.get("versions", {})
        _check(_is_int(threads) and threads >= 0, f"threads {threads!r} is not an integer >= 0")
        _check(isinstance(versions, dict) and all(isinstance(v, str) for v in versions.values()),
               "versions is not an object of strings")
        return cls(MeasureInput(task, Config(cfg["index"], knobs), ref), result, version, threads, versions,
                   _timing(d.get("timing", "warm")))


_TEMPLATE_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class RecordError(ValueError):
    """A log line that is JSON but breaks the record schema."""


def _check(ok: object, what: str) -> None:
    if not ok:
        raise RecordError(what)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
    """Records of a log, in order; corrupt or truncated lines, and lines that break the record schema
    (`Record.from_json`), are skipped and counted. A missing log has none; one that is not a regular file is an
    error (a device or fifo could be read without end)."""
    stats = stats if stats is not None else LogReadStats()
    p = Path(path)
    if not is_regular_file(p, "log", "read"):
        return
    try:
        fh = p.open("r", encoding="utf-8-sig", errors="replace")  # -sig: a byte-order mark is not part of a record
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
        out.extend(iter_records(p, stats))
    return out


DISK_FULL = ("the disk is full: every measurement before this one is in the log {path}; free some space and "
             "re-run the same command to resume")


class LogFullError(AutotuneError):
    """The log's disk is full; the records written before are whole."""


class LogWriter:
    """Appends records; each line is written whole and flushed (and fsynced) before the next.

    The log is locked (`fcntl.flock`, exclusive) while the writer is open: a second writer of the same log, in
    this or another process, is an AutotuneError naming it. Readers do not lock. A line the disk had no room for
    is cut off again (LogFullError), so the log ends with the last whole record."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        check_log_path(self.path)
        self._fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._created = not self.path.exists()
            self._fh = open(self.path, "ab", buffering=0)  # closed (the lock with it) also if never close()d
        except OSError as err:
            raise AutotuneError(f"cannot write log {self.path}: {err.strerror}; name a writable --log") from None
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._fh.close()
            raise AutotuneError(f"log {self.path} is in use by another autotune run (it is locked while that run "
                                "writes it): wait for it to end, or name another --log") from None
        self._written = False
        # A previous run killed mid-write may have left a partial line: never glue onto it.
        if os.fstat(self._fh.fileno()).st_size > 0:
            with self.path.open("rb") as rfh:
                rfh.seek(-1, os.SEEK_END)
                if rfh.read(1) != b"\n":
                    self._append(b"\n")

    def _append(self, data: bytes) -> None:
        fd = self._fh.fileno()
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self._fsync:
                os.fsync(fd)
        except OSError as err:
            try:
                os.ftruncate(fd, start)  # no partial line
            except OSError:
                pass
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise LogFullError(DISK_FULL.format(path=self.path)) from None
            raise AutotuneError(f"cannot write log {self.path}: {err.strerror}") from None

    def write(self, record: Record) -> None:
        self._append(record.to_json().encode() + b"\n")
        self._written = True

    def close(self) -> None:
        if self._fh.closed:
            return
        if self._created and not self._written and os.fstat(self._fh.fileno()).st_size == 0:
            self.path.unlink(missing_ok=True)  # a run that committed nothing leaves no empty log
        self._fh.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_log(path: str | os.PathLike, records: Iterable[Record]) -> None:
    """Write `records` as a new log at `path`, whole or not at all (`files.replace_file`: a symlink is followed,
    anything but a regular file or a new name is refused, an interrupted write leaves the old file whole)."""
    records = list(records)
    replace_file(path, lambda fh: fh.writelines(r.to_json().encode() + b"\n" for r in records), what="log")


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
    """The valid trials first measured within `policy.share` of the best one's throughput (at most
    `policy.most(valid trials)`), fastest first."""
    valid = sorted((r for r in trials if r.result.ok), key=lambda r: r.result.mean_s)
    if not valid:
        return []
    bound = valid[0].result.mean_s / policy.share
    return [r for r in valid[:policy.most(len(valid))] if r.result.mean_s <= bound]


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
