"""RPC tracker and servers: start and stop them, and the `autotune rpc ...` commands.

Servers and trackers run in their own session (process group), because TVM runs the real
server in child processes: `stop` kills the whole group, so nothing is left holding a port.
Each group also ends with the process that started it (killed with SIGKILL too): its leader
watches its parent and, on Linux, gets a parent-death signal.
Kernel threads on a server come from its environment: start it with TVM_NUM_THREADS=N
(`autotune rpc server --threads N` does that).

Neither has any authentication: whoever reaches a server's port runs native code on its
machine, and whoever reaches the tracker is handed servers. Both bind to loopback unless
told otherwise with `allow_remote` (`--allow-remote`).

`autotune rpc server` runs TVM's own server loop (`tvm.rpc.server._listen_loop`) under a
small supervisor: TVM 0.27 lets a session process that dies (a kernel that segfaults) end
the listening thread for good, leaving a server that never serves again. The supervisor
restarts the loop, so a crashing kernel costs one session, not the server.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from .pool import ROOT, import_tvm_without_torch
from .tracker import DEFAULT_TRACKER, format_status, parse_address, tracker_status, tracker_summary

SERVER_MAIN = "autotune.measure.rpc_services"  # the module a supervised server process runs (this one)


# ---- processes ---------------------------------------------------------------------------

REMOTE_FLAG = "--allow-remote (Python: allow_remote=True)"


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) means this machine only: 127.0.0.0/8, ::1, localhost."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def check_bind(host: str, allow_remote: bool, what: str) -> None:
    """Refuse to listen on anything but loopback unless `allow_remote`: TVM's RPC has no authentication."""
    if not allow_remote and not is_loopback(host):
        raise AutotuneError(f"{what} --host {host} is reachable from other machines and RPC has no authentication "
                            f"(whoever reaches it runs code here); use a private network or an SSH tunnel and pass "
                            f"{REMOTE_FLAG}, or keep 127.0.0.1")


def _spawn(args: list[str], log: str | Path | None, env: dict[str, str] | None) -> subprocess.Popen:
    """`python -m args...` in its own session, ending with this process; output to `log` (None: inherit the
    terminal)."""
    args = [*args, "--parent", str(os.getpid())]
    if threading.current_thread() is threading.main_thread():  # the signal comes when the spawning thread ends
        args.append("--parent-death-signal")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out = open(log, "ab") if log else None  # noqa: SIM115 - the child keeps the file
    try:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT if out else None,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {}), "PYTHONPATH": path})
    finally:
        if out:
            out.close()


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is already gone
        pass


def stop(process: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop a tracker or server and every process it started: TERM to its group, then KILL."""
    _killpg(process.pid, signal.SIGTERM)  # pgid == pid: started with start_new_session
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    _killpg(process.pid, signal.SIGKILL)  # what ignored TERM, and children the leader left behind
    process.wait()


def start_tracker(host: str = "127.0.0.1", port: int = 9190, log: str | Path | None = None,
                  wait: float = 30.0, allow_remote: bool = False) -> subprocess.Popen:
    """Start TVM's tracker on exactly host:port; return once it answers (wait=0: at once).
    A host other than loopback needs `allow_remote` (see `check_bind`)."""
    check_bind(host, allow_remote, "RPC tracker")
    proc = _spawn([SERVER_MAIN, "tracker", "--host", host, "--port", str(port)], log, None)
    if wait <= 0:
        return proc
    deadline = time.monotonic() + wait
    while True:
        try:
            tracker_summary(host, port, timeout=2.0)
            return proc
        except OSError as err:
            code = proc.poll()
            if code is not None or time.monotonic() > deadline:
                stop(proc)
                why = f"exited with code {code}" if code is not None else f"not answering after {wait:g} s"
                raise AutotuneError(f"RPC tracker on {host}:{port} {why}: {err}{_log_tail(log)}") from None
            time.sleep(0.2)


def start_server(tracker: str, key: str, host: str = "127.0.0.1", port: int = 9090, env: dict[str, str] | None = None,
                 port_end: int | None = None, log: str | Path | None = None,
                 allow_remote: bool = False) -> subprocess.Popen:
    """Start a supervised RPC server that registers under `key` at tracker "HOST:PORT".

    It binds the first free port in [port, port_end) (default port + 100). Set kernel threads
    with env={"TVM_NUM_THREADS": "N"}. Use `wait_for_servers` to know when it is registered.
    A host other than loopback needs `allow_remote` (see `check_bind`).
    """
    parse_address(tracker)
    check_bind(host, allow_remote, "RPC server")
    args = [SERVER_MAIN, "server", "--host", host, "--port", str(port), "--port-end", str(port_end or port + 100),
            "--tracker", tracker, "--key", key]
    return _spawn(args, log, env)


def wait_for_servers(host: str, port: int, key: str, count: int, timeout: float = 60.0) -> None:
    """Block until at least `count` servers are registered under `key`."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = len(tracker_status(host, port)["keys"].get(key, {}).get("servers", []))
        except OSError:
            seen = 0
        if seen >= count:
            return
        time.sleep(0.2)
    raise AutotuneError(f"only {seen} of {count} RPC servers registered under key {key} at {host}:{port} "
                        f"after {timeout:g} s")


def _log_tail(log: str | Path | None, lines: int = 5) -> str:
    if not log or not Path(log).is_file():
        return ""
    tail = Path(log).read_text(errors="replace").strip().splitlines()[-lines:]
    return "\n  " + "\n  ".join(tail) if tail else ""


# ---- the supervised server (python -m autotune.measure.rpc_services ...) -------------------------

def _bind(host: str, port: int, port_end: int) -> tuple[socket.socket, int]:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for p in range(port, max(port_end, port + 1)):
        try:
            sock.bind((host, p))
            sock.listen(1)
            return sock, p
        except OSError:
            continue
    sock.close()
    raise AutotuneError(f"cannot bind an RPC server to any port in [{port}, {port_end}) on {host}")


def _wait_for_tracker(host: str, port: int) -> None:
    """Poll until the tracker answers (TVM's own loop retries only every 5 s)."""
    for attempt in itertools.count():
        try:
            tracker_summary(host, port, timeout=2.0)
            return
        except OSError as err:
            if attempt == 10:
                print(f"waiting for the RPC tracker at {host}:{port}: {err}", flush=True)
            time.sleep(0.2 if attempt < 100 else 2.0)


def serve(host: str, port: int, port_end: int, tracker: str, key: str) -> None:
    """Serve sessions forever with TVM's server loop; restart it when a session process dies."""
    import_tvm_without_torch()
    from tvm.rpc import server as tvm_server

    tracker_addr = parse_address(tracker)
    sock, bound = _bind(host, port, port_end)
    threads = os.environ.get("TVM_NUM_THREADS", "unset")
    print(f"RPC server on {host}:{bound}, key {key}, tracker {tracker}, TVM_NUM_THREADS={threads}", flush=True)
    _wait_for_tracker(*tracker_addr)
    cwd = os.getcwd()
    while True:
        try:
            tvm_server._listen_loop(sock, bound, key, tracker_addr, None, None)
        except RuntimeError as err:  # the session process died; TVM's loop gives up, we go on
            print(f"RPC server {host}:{bound}: {err}; serving again", flush=True)
            os.chdir(cwd)
            time.sleep(0.5)


def run_tracker(host: str, port: int) -> None:
    """TVM's tracker on exactly host:port, until killed (what `tvm.exec.rpc_tracker` runs, in this process:
    TVM's `Tracker` starts a process of its own for it, one more import of TVM before it answers)."""
    import logging

    import_tvm_without_torch()
    from tvm.rpc.tracker import PopenTrackerServerState

    logging.basicConfig(level=logging.INFO)
    PopenTrackerServerState(host, port, port_end=port + 1).thread.join()


def _end_group() -> None:
    """SIGKILL this process and, when it leads its process group, everything in the group."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def end_with_parent(parent: int, death_signal: bool) -> None:
    """End this process's group when process `parent` ends, however it ends (SIGKILL included).

    A daemon thread polls the parent's pid; on Linux, with `death_signal`, the kernel also sends SIGTERM the
    moment the parent (the thread that spawned this process) ends. SIGTERM then ends the whole group too.
    """
    me = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != me:  # a session process forked by TVM inherits this handler: the default action there
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _end_group()

    signal.signal(signal.SIGTERM, on_term)
    if death_signal and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no prctl: the watching thread still ends the group
            pass
    if os.getppid() != parent:  # the parent ended before the signal was set
        _end_group()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.25)
        _end_group()

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


# ---- `autotune rpc ...` -------------------------------------------------------------------

REMOTE_HELP = ("allow a --host other than loopback: RPC has no authentication, so whoever reaches the port runs "
               "code on this machine; only on a private network (or use an SSH tunnel and keep 127.0.0.1)")


def add_rpc_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `autotune rpc tracker|server|status` to the CLI; dispatch with `cmd_rpc`."""
    p = subparsers.add_parser("rpc", help="RPC tracker and servers for remote measurement")
    sub = p.add_subparsers(dest="rpc_command", required=True)
    t = sub.add_parser("tracker", help="run an RPC tracker in the foreground (Ctrl-C stops it)")
    t.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (0.0.0.0: every interface; other than loopback needs --allow-remote)")
    t.add_argument("--port", type=int, default=9190, help="port to listen on")
    t.add_argument("--allow-remote", action="store_true", help=REMOTE_HELP)
    s = sub.add_parser("server", help="run an RPC server in the foreground (Ctrl-C stops it)")
    s.add_argument("--key", required=True, help="device key clients ask the tracker for, e.g. epyc-2core")
    s.add_argument("--tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (other than loopback needs --allow-remote); the tracker hands out the "
                        "address the server connects to it from")
    s.add_argument("--allow-remote", action="store_true", help=REMOTE_HELP)
    s.add_argument("--port", type=int, default=9090, help="first port to try")
    s.add_argument("--port-end", type=int, help="end of the port range to try (default: PORT+100)")
    s.add_argument("--threads", type=int, default=0, help="kernel threads (sets TVM_NUM_THREADS; 0: inherit)")
    st = sub.add_parser("status", help="servers and queues the tracker sees")
    st.add_argument("--tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT")
    st.add_argument("--json", action="store_true", help="print the tracker's answer as JSON")
    return p


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _foreground(proc: subprocess.Popen) -> int:
    """Wait for a started process; Ctrl-C or SIGTERM stops its whole group."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop(proc)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_tracker(args: argparse.Namespace) -> int:
    proc = start_tracker(args.host, args.port, allow_remote=args.allow_remote)
    print(f"RPC tracker on {args.host}:{args.port}; Ctrl-C to stop", file=sys.stderr)
    return _foreground(proc)


def cmd_server(args: argparse.Namespace) -> int:
    env = {"TVM_NUM_THREADS": str(args.threads)} if args.threads > 0 else None
    proc = start_server(args.tracker, args.key, args.host, args.port, env=env, port_end=args.port_end,
                        allow_remote=args.allow_remote)
    return _foreground(proc)


def cmd_status(args: argparse.Namespace) -> int:
    host, port = parse_address(args.tracker)
    try:
        status = tracker_status(host, port)
    except OSError as err:
        raise AutotuneError(f"cannot reach RPC tracker at {host}:{port}: {err}") from None
    print(json.dumps(status) if args.json else format_status(status))
    return 0


def cmd_rpc(args: argparse.Namespace) -> int:
    return {"tracker": cmd_tracker, "server": cmd_server, "status": cmd_status}[args.rpc_command](args)


def _server_main(argv: list[str] | None = None) -> None:
    """`python -m autotune.measure.rpc_services server|tracker ...`: what `start_server`/`start_tracker` run."""
    p = argparse.ArgumentParser(prog=f"python -m {SERVER_MAIN}", description="supervised TVM RPC server or tracker")
    p.add_argument("role", choices=("server", "tracker"))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9090)
    p.add_argument("--port-end", type=int, default=9190)
    p.add_argument("--tracker")
    p.add_argument("--key")
    p.add_argument("--parent", type=int, help="end with this process (pid)")
    p.add_argument("--parent-death-signal", action="store_true", help="and ask Linux for SIGTERM when it ends")
    a = p.parse_args(argv)
    if a.parent is not None:
        end_with_parent(a.parent, a.parent_death_signal)
    try:
        if a.role == "tracker":
            run_tracker(a.host, a.port)
        elif a.tracker is None or a.key is None:
            p.error("a server needs --tracker and --key")
        else:
            serve(a.host, a.port, a.port_end, a.tracker, a.key)
    except AutotuneError as err:
        print(f"autotune: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    _server_main()
