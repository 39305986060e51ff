"""Process records: a started process is found by pid + start time, stopped by pid, never confused."""

from __future__ import annotations

import dataclasses
import socket
import sys
import time
from pathlib import Path

from perfsched_dev.devcluster.process import (
    ProcessRecord,
    ephemeral_port_range,
    free_ports,
    is_running,
    port_is_free,
    spawn,
    stop,
    tail,
)

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def test_spawned_process_runs_logs_and_stops(tmp_path: Path) -> None:
    proc, record = spawn("sleeper", SLEEPER, tmp_path / "logs" / "sleeper.log")
    try:
        assert is_running(record)
        assert record.pid == proc.pid
        deadline = time.monotonic() + 10
        while "up" not in tail(record.log_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tail(record.log_path) == "up"  # stdout goes to the log file
    finally:
        assert stop(record, timeout_s=5)
    assert not is_running(record)
    assert proc.poll() is not None  # reaped: no zombie left


def test_a_record_with_another_start_time_is_not_ours_and_is_not_signalled(tmp_path: Path) -> None:
    _proc, record = spawn("sleeper", SLEEPER, tmp_path / "sleeper.log")
    try:
        impostor = dataclasses.replace(record, start_ticks=record.start_ticks + 1)  # as after pid reuse
        assert not is_running(impostor)
        assert stop(impostor) is False
        assert is_running(record)
    finally:
        stop(record, timeout_s=5)


def test_process_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('x', flush=True); "
        "time.sleep(60)"
    )
    _proc, record = spawn("stubborn", [sys.executable, "-c", code], tmp_path / "s.log")
    time.sleep(0.3)  # let it install the handler
    assert stop(record, timeout_s=0.5)
    assert not is_running(record)


def test_record_round_trips_through_json() -> None:
    record = ProcessRecord("etcd", 42, 1234, ("/usr/bin/etcd", "--name=x"), "/tmp/etcd.log")
    assert ProcessRecord.from_json(record.to_json()) == record


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert all(port_is_free(p) for p in ports)
    # below the kernel's range for outgoing connections, so no client socket can take one before the
    # listener it is meant for starts
    lo, _ = ephemeral_port_range()
    if lo - 10000 >= 1000:
        assert all(10000 <= p < lo for p in ports), ports
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))
        sock.listen()
        assert not port_is_free(ports[0])
