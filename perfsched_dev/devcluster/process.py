"""Local processes of the control plane: start one detached, tell whether it still runs, stop it by pid.

A process is identified by its pid *and* its start time (field 22 of ``/proc/<pid>/stat``), so a pid the
kernel has reused for somebody else's process is never signalled. Processes start in their own session,
so they outlive the ``perfsched dev-cluster up`` command that started them and a Ctrl-C in the terminal
does not reach them. Also holds the free-port helpers. Impure (processes, sockets, ``/proc``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One started process: what it is, how to find it again, and where it logs."""

    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log_path: str
    #: what was added to the inherited environment, and the working directory: with ``argv``, what
    #: ``perfsched dev-cluster restart`` needs to start the same process again
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["env"] = dict(self.env)
        return data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ProcessRecord:
        return ProcessRecord(
            name=str(data["name"]),
            pid=int(data["pid"]),
            start_ticks=int(data["start_ticks"]),
            argv=tuple(str(a) for a in data["argv"]),
            log_path=str(data["log_path"]),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            cwd=str(data.get("cwd") or ""),
        )


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) is in parentheses and may contain spaces: split after the last ')'
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state), rest[19] is field 22 (starttime)


def start_ticks_of(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when no such process exists."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_running(record: ProcessRecord) -> bool:
    """True while the recorded process (same pid, same start time) exists and is not a zombie."""
    fields = _stat_fields(record.pid)
    if fields is None or int(fields[19]) != record.start_ticks:
        return False
    return fields[0] not in ("Z", "X")


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` detached (own session), stdout and stderr appended to ``log_path``.

    Raises ``FileNotFoundError``/``PermissionError`` when the program cannot be executed.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    ticks = start_ticks_of(proc.pid)
    record = ProcessRecord(
        name,
        proc.pid,
        ticks if ticks is not None else -1,
        tuple(argv),
        str(log_path),
        env=dict(env or {}),
        cwd=str(cwd) if cwd else "",
    )
    log.debug("started %s", name, extra={"pid": proc.pid, "argv": list(argv)})
    return proc, record


def stop(record: ProcessRecord, timeout_s: float = 10.0) -> bool:
    """Stop the recorded process: SIGTERM, wait up to ``timeout_s``, then SIGKILL.

    Signals nothing when the pid now belongs to another process. Returns True when a process was
    signalled. Reaps the process when it is our child, so no zombie is left behind.
    """
    if not is_running(record):
        _reap(record.pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_running(record):
            return True
        time.sleep(0.05)
    log.warning("%s did not stop on SIGTERM, sending SIGKILL", record.name, extra={"pid": record.pid})
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    for _ in range(100):
        _reap(record.pid)
        if not is_running(record):
            break
        time.sleep(0.05)
    return True


def kill(record: ProcessRecord, timeout_s: float = 10.0) -> bool:
    """SIGKILL the recorded process (a crash, no clean shutdown) and wait until it is gone.

    Signals nothing when the pid now belongs to another process; returns True when one was killed.
    """
    if not is_running(record):
        _reap(record.pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_running(record):
            break
        time.sleep(0.02)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (``ip_local_port_range``)."""
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return (32768, 60999)  # the Linux default
    return (lo, hi)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports that are free on ``host`` right now.

    They come from below the kernel's ephemeral range when it leaves room (10000 up to it): a port the
    kernel handed out for a listener we start a moment later could otherwise be taken in between as the
    local end of some client's outgoing connection (e.g. the apiserver's to etcd), and the listener would
    fail with "address already in use". Random within that window, so parallel callers rarely meet; each
    is checked by binding it. Falls back to kernel-picked ports when the window is too small.
    """
    lo, _ = ephemeral_port_range()
    window = range(10000, lo)
    sockets: list[socket.socket] = []
    try:
        if len(window) >= 1000:
            rng = random.Random(os.getpid() ^ time.monotonic_ns())
            for port in rng.sample(window, min(len(window), 64 * count)):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind((host, port))
                except OSError:
                    sock.close()
                    continue
                sockets.append(sock)
                if len(sockets) == count:
                    break
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def tail(path: str | Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
