"""Files autotune writes: an output replaced whole (`replace_file`), a log opened for appending (`check_log_path`),
and what a killed run left behind (temporaries named by the PID that made them)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import AutotuneError


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """The file that writing output `path` replaces: `path`, or the file its symlinks end at; AutotuneError (one
    line) unless that is a regular file or a new name in a folder this process can write (or make)."""
    target = _regular_or_new(Path(path), what)
    folder = _nearest_folder(target.parent, what, path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AutotuneError(f"cannot write {what} {path}: {_denied(folder)} in {folder}")
    return target


def _nearest_folder(start: Path, what: str, path: str | os.PathLike) -> Path:
    """The nearest existing folder at or above `start`: it decides whether a file below it can be made."""
    folder = start
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise AutotuneError(f"cannot write {what} {path}: {folder} is not a folder")
    return folder


def _denied(folder: Path) -> str:
    return "read-only file system" if _read_only(folder) else "permission denied"


def is_regular_file(path: str | os.PathLike, what: str, verb: str) -> bool:
    """True for a regular file, False for a name nothing is at; AutotuneError (`cannot <verb> <what>`) for a
    directory, a device, fifo or socket (read without end, or replaced by a write), or a path that cannot be
    looked at."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as err:
        raise AutotuneError(f"cannot {verb} {what} {path}: {err.strerror}") from None
    if stat.S_ISDIR(mode):
        raise AutotuneError(f"{what} {path} is a directory: name a file")
    if not stat.S_ISREG(mode):
        raise AutotuneError(f"{what} {path} is not a regular file (a device, fifo or socket): name a file")
    return True


def _regular_or_new(path: Path, what: str) -> Path:
    """`path`, or the file its symlinks end at; AutotuneError unless that is a regular file or a new name (whose
    folder the caller checks)."""
    target = Path(os.path.realpath(path))
    is_regular_file(target, what, "write")
    return target


def remove_stale(folder: Path, pattern: re.Pattern[str]) -> None:
    """Remove the entries of `folder` whose name `pattern` matches with a group `pid` naming a dead process."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or pid_alive(int(m.group("pid"))):
            continue
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                pass


def replace_file(path: str | os.PathLike, write: Callable[[BinaryIO], None], what: str = "output") -> None:
    """Write the file at `path` whole or not at all: `write(fh)` fills a temporary file beside it (named by this
    process's PID; those of dead processes are removed first), fsynced, then renamed over it. A symlink is
    followed (the file it points to is replaced); anything but a regular file or a new name is refused.
    A failure is an AutotuneError of one line, but a full disk, which stays the OSError it is (ENOSPC)."""
    target = check_output_path(path, what)
    remove_stale(target.parent, re.compile(rf"\.{re.escape(target.name)}\.(?P<pid>\d+)\.tmp"))
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the disk is full: `autotune.cli.main` says so in one line
        raise AutotuneError(f"cannot write {what} {path}: {_reason(err)}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def check_log_path(path: str | os.PathLike) -> None:
    """AutotuneError (one line) unless a log can be appended at `path`: a regular file (or a symlink to one) or a
    new name in a folder that can be made, on a filesystem that can be written."""
    target = Path(os.path.realpath(path))
    exists = is_regular_file(target, "log", "use")
    folder = _nearest_folder(target.parent, "log", path)
    writable = os.access(target, os.W_OK) if exists else os.access(folder, os.W_OK | os.X_OK)
    if not writable:
        raise AutotuneError(f"cannot write log {path}: {_denied(folder)}; name a writable --log")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _reason(err: OSError) -> str:
    if err.errno == errno.EROFS:
        return "read-only file system"
    return err.strerror or str(err)
