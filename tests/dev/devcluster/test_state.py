"""``DevCluster`` state handling without the real binaries: status phases and ``down`` by recorded pid."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from perfsched_dev.devcluster.cluster import ClusterRunningError, ClusterState, DevCluster
from perfsched_dev.devcluster.process import is_running, spawn

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _fake_cluster(state_dir: Path, names: list[str]) -> tuple[DevCluster, ClusterState]:
    state_dir.mkdir(parents=True)
    (state_dir / "run").mkdir()
    tmp = state_dir / "etcd-data"
    tmp.mkdir()
    records = [spawn(n, SLEEPER, state_dir / "logs" / f"{n}.log")[1] for n in names]
    state = ClusterState(
        state_dir=str(state_dir),
        kubeconfig=str(state_dir / "kubeconfig"),
        phase="running",
        started_at=time.time(),
        ports={"apiserver": 1},
        processes=records,
        temp_dirs=[str(tmp)],
    )
    (state_dir / "kubeconfig").write_text("apiVersion: v1\n")
    (state_dir / "state.json").write_text(json.dumps(state.to_json()))
    return DevCluster(state_dir), state


def test_state_round_trips_through_json(tmp_path: Path) -> None:
    dc, state = _fake_cluster(tmp_path / "dc", ["etcd"])
    try:
        loaded = dc.load()
        assert loaded is not None
        assert loaded.to_json() == state.to_json()
        assert loaded.pids == {"etcd": state.processes[0].pid}
    finally:
        dc.down()


def test_status_phases_and_down_stops_exactly_the_recorded_pids(tmp_path: Path) -> None:
    dc, state = _fake_cluster(tmp_path / "dc", ["etcd", "kube-apiserver"])
    bystander, bystander_record = spawn("bystander", SLEEPER, tmp_path / "bystander.log")
    try:
        current = dc.status()
        assert current is not None and current.phase == "running"
        with pytest.raises(ClusterRunningError, match="already running"):
            dc.up()
        os.kill(state.processes[1].pid, signal.SIGKILL)
        time.sleep(0.2)
        current = dc.status()
        assert current is not None and current.phase == "degraded"

        assert dc.down() == ["etcd"]  # the apiserver was already dead
        assert not any(is_running(r) for r in state.processes)
        assert is_running(bystander_record)  # not ours: untouched
        assert not (tmp_path / "dc" / "state.json").exists()
        assert not (tmp_path / "dc" / "kubeconfig").exists()
        assert not (tmp_path / "dc" / "run").exists()
        assert not Path(state.temp_dirs[0]).exists()
        assert dc.status() is None
        assert dc.down() == []  # idempotent
    finally:
        bystander.kill()
        bystander.wait()


def test_unreadable_state_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "dc").mkdir()
    (tmp_path / "dc" / "state.json").write_text("{not json")
    from perfsched_dev.devcluster.tools import DevClusterError

    with pytest.raises(DevClusterError, match=r"state\.json"):
        DevCluster(tmp_path / "dc").status()


def test_restart_kills_and_starts_the_same_command_line_environment_and_directory(tmp_path: Path) -> None:
    from perfsched_dev.devcluster.process import spawn as spawn_process

    state_dir = tmp_path / "dc"
    dc, state = _fake_cluster(state_dir, ["etcd"])
    # a component that writes what it was started with, then sleeps (like an operator would run)
    probe = [
        sys.executable,
        "-c",
        "import os, sys, time; print('started', os.getcwd(), os.environ.get('PERFSCHED_X'), sys.argv[1:], "
        "flush=True); time.sleep(120)",
        "--flag=1",
    ]
    _, record = spawn_process(
        "perfsched-operator",
        probe,
        state_dir / "logs" / "op.log",
        env={"PERFSCHED_X": "42"},
        cwd=state_dir / "run",
    )
    dc.add_process(record)
    log_file = state_dir / "logs" / "op.log"

    def starts(n: int) -> list[str]:
        deadline = time.monotonic() + 10
        while True:
            lines = [line for line in log_file.read_text().splitlines() if line.startswith("started")]
            if len(lines) >= n or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)

    try:
        assert len(starts(1)) == 1
        new = dc.restart("operator")  # the alias of perfsched-operator
        assert new.pid != record.pid and not is_running(record) and is_running(new)
        assert (new.argv, dict(new.env), new.cwd) == (
            record.argv,
            {"PERFSCHED_X": "42"},
            str(state_dir / "run"),
        )
        loaded = dc.load()
        assert loaded is not None
        assert loaded.pids == {"etcd": state.processes[0].pid, "perfsched-operator": new.pid}
        # the same log, appended: both starts saw the same directory, environment and arguments
        lines = starts(2)
        assert len(lines) == 2 and lines[0] == lines[1]
        assert lines[0] == f"started {state_dir / 'run'} 42 ['--flag=1']"
        from perfsched_dev.devcluster.tools import DevClusterError

        with pytest.raises(DevClusterError, match=r"no component 'nope'.*known: etcd, perfsched-operator"):
            dc.restart("nope")
    finally:
        dc.down()
