"""RPC tracker and servers: start, stop, query, and the `autotune rpc ...` commands.

Servers and trackers run in their own session (process group), because TVM runs the real
server in child processes: `stop` kills the whole group, so nothing is left holding a port.
Kernel threads on a server come from its environment: start it with TVM_NUM_THREADS=N
(`autotune rpc server --threads N` does that).

`autotune rpc server` runs TVM's own server loop (`tvm.rpc.server._listen_loop`) under a
small supervisor: TVM 0.27 lets a session process that dies (a kernel that segfaults) end
the listening thread for good, leaving a server that never serves again. The supervisor
restarts the loop, so a crashing kernel costs one session, not the server.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .errors import AutotuneError

# The tracker's wire protocol (tvm.rpc.base): a magic number, then length-prefixed JSON messages.
TRACKER_MAGIC = 0x2F271
CODE_SUCCESS, CODE_REQUEST, CODE_SUMMARY = 0, 4, 6
DEFAULT_TRACKER = "127.0.0.1:9190"
ROOT = Path(__file__).resolve().parents[1]  # where `autotune` is importable


# ---- processes ---------------------------------------------------------------------------

def _spawn(args: list[str], log: str | Path | None, env: dict[str, str] | None) -> subprocess.Popen:
    """`python -m args...` in its own session; output to `log` (None: inherit the terminal)."""
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
                  wait: float = 30.0) -> subprocess.Popen:
    """Start `tvm.exec.rpc_tracker` on exactly host:port; return once it answers (wait=0: at once)."""
    proc = _spawn(["tvm.exec.rpc_tracker", "--host", host, "--port", str(port), "--port-end", str(port + 1)],
                  log, None)
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
                 port_end: int | None = None, log: str | Path | None = None) -> subprocess.Popen:
    """Start a supervised RPC server that registers under `key` at tracker "HOST:PORT".

    It binds the first free port in [port, port_end) (default port + 100). Set kernel threads
    with env={"TVM_NUM_THREADS": "N"}. Use `wait_for_servers` to know when it is registered.
    """
    parse_address(tracker)
    args = ["autotune.rpc_services", "--host", host, "--port", str(port), "--port-end", str(port_end or port + 100),
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


# ---- talking to the tracker --------------------------------------------------------------

def parse_address(text: str) -> tuple[str, int]:
    """"HOST:PORT" -> (host, port), with a one-line error for anything else."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise AutotuneError(f"bad tracker address {text!r}: expected HOST:PORT, e.g. {DEFAULT_TRACKER}")
    return host, int(port)


def _send(sock: socket.socket, message: Any) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("<i", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the tracker")
        buf += chunk
    return buf


def _recv(sock: socket.socket) -> Any:
    (size,) = struct.unpack("<i", _recv_exact(sock, 4))
    return json.loads(_recv_exact(sock, size))


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.sendall(struct.pack("<i", TRACKER_MAGIC))
        if struct.unpack("<i", _recv_exact(sock, 4))[0] != TRACKER_MAGIC:
            raise ConnectionError(f"{host}:{port} is not an RPC tracker")
    except BaseException:
        sock.close()
        raise
    return sock


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> dict[str, Any]:
    """The tracker's raw summary: {"queue_info": {key: {free, pending}}, "server_info": [...]}."""
    with _connect(host, port, timeout) as sock:
        _send(sock, [CODE_SUMMARY])
        code, summary = _recv(sock)
    if code != CODE_SUCCESS:
        raise ConnectionError(f"tracker at {host}:{port} refused the summary request (code {code})")
    return summary


def request_server(host: str, port: int, key: str, timeout: float) -> tuple[str, int, str]:
    """Ask the tracker for a free server under `key`: (server host, server port, match key).

    Waits up to `timeout` seconds for one to be free (socket.timeout after that).
    """
    with _connect(host, port, timeout) as sock:
        _send(sock, [CODE_REQUEST, key, "", 1])
        code, (url, server_port, matchkey) = _recv(sock)
    if code != CODE_SUCCESS:
        raise ConnectionError(f"tracker at {host}:{port} refused the request for key {key} (code {code})")
    return url, int(server_port), matchkey


def tracker_status(host: str, port: int, timeout: float = 5.0) -> dict[str, Any]:
    """What the tracker sees: {"keys": {key: {"free", "pending", "servers": ["h:p", ...]}}}."""
    summary = tracker_summary(host, port, timeout)
    keys: dict[str, dict[str, Any]] = {}
    for key, queue in summary.get("queue_info", {}).items():
        keys[key] = {"free": int(queue.get("free", 0)), "pending": int(queue.get("pending", 0)), "servers": []}
    for info in summary.get("server_info", []):
        key = info.get("key", "").split(":", 1)[-1]  # "server:KEY"
        addr = ":".join(str(x) for x in info.get("addr", ()))
        keys.setdefault(key, {"free": 0, "pending": 0, "servers": []})["servers"].append(addr)
    return {"tracker": f"{host}:{port}", "keys": keys}


def format_status(status: dict[str, Any]) -> str:
    """Human-readable `autotune rpc status` output."""
    keys = {k: v for k, v in status["keys"].items() if v["servers"] or v["pending"]}
    if not keys:
        return f"tracker {status['tracker']}: no server registered"
    lines = [f"tracker {status['tracker']}", f"{'key':<20} {'servers':>7} {'free':>5} {'pending':>7}  addresses"]
    for key, v in sorted(keys.items()):
        lines.append(f"{key:<20} {len(v['servers']):>7} {v['free']:>5} {v['pending']:>7}  "
                     f"{', '.join(sorted(v['servers'])) or '-'}")
    return "\n".join(lines)


# ---- the supervised server (python -m autotune.rpc_services ...) -------------------------

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


# ---- `autotune rpc ...` -------------------------------------------------------------------

def add_rpc_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `autotune rpc tracker|server|status` to the CLI; dispatch with `cmd_rpc`."""
    p = subparsers.add_parser("rpc", help="RPC tracker and servers for remote measurement")
    sub = p.add_subparsers(dest="rpc_command", required=True)
    t = sub.add_parser("tracker", help="run an RPC tracker in the foreground (Ctrl-C stops it)")
    t.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    t.add_argument("--port", type=int, default=9190, help="port to listen on")
    s = sub.add_parser("server", help="run an RPC server in the foreground (Ctrl-C stops it)")
    s.add_argument("--key", required=True, help="device key clients ask the tracker for, e.g. epyc-2core")
    s.add_argument("--tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (the tracker records the address the server connects from)")
    s.add_argument("--port", type=int, default=9090, help="first port to try")
    s.add_argument("--port-end", type=int, help="end of the port range to try (default: PORT+100)")
    s.add_argument("--threads", type=int, default=0, help="kernel threads (sets TVM_NUM_THREADS; 0: inherit)")
    st = sub.add_parser("status", help="servers and queues the tracker sees")
    st.add_argument("--tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT")
    st.add_argument("--json", action="store_true", help="print the tracker's answer as JSON")
    return p


def add_rpc_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """`--rpc-key/--rpc-tracker/--rpc-session-timeout` for `autotune tune` (see `runner_from_args`)."""
    parser.add_argument("--rpc-key", help="measure on the RPC servers registered under this key (autotune rpc)")
    parser.add_argument("--rpc-tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT for --rpc-key")
    parser.add_argument("--rpc-session-timeout", type=float,
                        help="seconds one remote measurement may take (default: --timeout + 10)")


def runner_from_args(args: argparse.Namespace, options: Any) -> Any:
    """An RPCRunner when --rpc-key was given, else None (measure locally). `options`: RunnerOptions."""
    if not args.rpc_key:
        return None
    from .rpc import RPCRunner  # rpc imports this module

    host, port = parse_address(args.rpc_tracker)
    return RPCRunner(args.rpc_key, host, port, options, session_timeout=args.rpc_session_timeout)


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
    proc = start_tracker(args.host, args.port)
    print(f"RPC tracker on {args.host}:{args.port}; Ctrl-C to stop", file=sys.stderr)
    return _foreground(proc)


def cmd_server(args: argparse.Namespace) -> int:
    env = {"TVM_NUM_THREADS": str(args.threads)} if args.threads > 0 else None
    proc = start_server(args.tracker, args.key, args.host, args.port, env=env, port_end=args.port_end)
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
    p = argparse.ArgumentParser(prog="python -m autotune.rpc_services", description="supervised TVM RPC server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9090)
    p.add_argument("--port-end", type=int, default=9190)
    p.add_argument("--tracker", required=True)
    p.add_argument("--key", required=True)
    a = p.parse_args(argv)
    try:
        serve(a.host, a.port, a.port_end, a.tracker, a.key)
    except AutotuneError as err:
        print(f"autotune: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    _server_main()
