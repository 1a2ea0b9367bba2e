"""The RPC tracker's client side: its address, its wire protocol, and what it answers (servers, queues)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from ..errors import AutotuneError

# The tracker's wire protocol (tvm.rpc.base): a magic number, then length-prefixed JSON messages.
TRACKER_MAGIC = 0x2F271
CODE_SUCCESS, CODE_REQUEST, CODE_SUMMARY = 0, 4, 6
DEFAULT_TRACKER = "127.0.0.1:9190"


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
