"""``perfsched emulate --exec``: a pod spec -> the local process, and the pod lifecycle around it.

The planning functions are pure and checked on tables; the emulator runs real (tiny ``sh``) processes
against a fake API with a fake clock, so grace periods pass without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from perfsched_dev.emulator.exec import (
    LINGER_S,
    ExecConfig,
    ExecEmulator,
    ExecError,
    container_env,
    expand,
    plan_process,
)


def pod(
    name: str = "job-g1-0",
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
    env: list[dict[str, Any]] | None = None,
    node: str = "exec-0",
    grace: int = 5,
    phase: str = "Pending",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "uid": f"uid-{name}",
        "labels": {"perfsched.dev/job-name": "job", "perfsched.dev/generation": "1"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = grace
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {
                    "name": "worker",
                    "image": "trainer:1",
                    "command": command if command is not None else ["python3", "train.py"],
                    "args": args or [],
                    "env": env or [],
                    "volumeMounts": [
                        {"name": "ckpt", "mountPath": "/ckpt", "subPathExpr": "$(JOB)"},
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                    ],
                }
            ],
            "volumes": [
                {"name": "ckpt", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "token", "projected": {"sources": []}},
            ],
        },
        "status": {"phase": phase},
    }


# --- pure planning ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("--nnodes $(WORLD_SIZE)", "--nnodes 2"),  # defined: replaced
        ("$(UNDEFINED)", "$(UNDEFINED)"),  # undefined: left alone, as Kubernetes does
        ("$$(WORLD_SIZE)", "$(WORLD_SIZE)"),  # $$ escapes
        ("a$(RANK)b$(RANK)", "a1b1"),
    ],
)
def test_expand_like_kubernetes(text: str, out: str) -> None:
    assert expand(text, {"WORLD_SIZE": "2", "RANK": "1"}) == out


def test_env_resolves_values_references_and_downward_api() -> None:
    p = pod(
        env=[
            {"name": "JOB", "value": "job"},
            {"name": "DIR", "value": "/ckpt/$(JOB)"},
            {"name": "PERFSCHED_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "GEN",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['perfsched.dev/generation']"}},
            },
        ]
    )
    env = container_env(p, p["spec"]["containers"][0])
    assert env == {"JOB": "job", "DIR": "/ckpt/job", "PERFSCHED_POD_NAME": "job-g1-0", "GEN": "1"}


def test_env_from_a_secret_is_refused_by_name() -> None:
    p = pod(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    with pytest.raises(ExecError, match="env TOKEN from secretKeyRef is not supported"):
        container_env(p, p["spec"]["containers"][0])


def test_plan_runs_on_loopback_with_volumes_as_local_directories(tmp_path: Path) -> None:
    p = pod(
        command=["torchrun", "--nnodes", "$(WORLD_SIZE)", "--master-addr", "$(MASTER_ADDR)", "train.py"],
        args=["--checkpoint-dir", "/ckpt", "--out=/scratch/x", "--other", "/ckptx"],
        env=[
            {"name": "JOB", "value": "job"},
            {"name": "WORLD_SIZE", "value": "2"},
            {"name": "MASTER_ADDR", "value": "job-0.job.team.svc"},
            {"name": "MASTER_PORT", "value": "29500"},
            {"name": "DATA", "value": "/scratch/data"},
        ],
    )
    plan = plan_process(p, tmp_path, master_port=41234, base_env={"PATH": "/bin"}, pythonpath="/site")
    pvc = tmp_path / "team" / "pvc" / "shared" / "job"  # claim directory + subPathExpr
    scratch = tmp_path / "team" / "job-g1-0" / "volumes" / "scratch"
    assert plan.argv == (
        "torchrun", "--nnodes", "2", "--master-addr", "127.0.0.1", "train.py",
        "--checkpoint-dir", str(pvc), f"--out={scratch}/x", "--other", "/ckptx",
    )  # fmt: skip
    assert plan.env["MASTER_ADDR"] == "127.0.0.1" and plan.env["MASTER_PORT"] == "41234"
    assert plan.env["DATA"] == f"{scratch}/data" and plan.env["PYTHONPATH"] == "/site"
    assert plan.env["OMP_NUM_THREADS"] == "1" and plan.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert plan.cwd == tmp_path / "team" / "job-g1-0" and plan.log_path.name == "log"
    assert pvc in plan.dirs and scratch in plan.dirs and plan.grace_s == 5


def test_plan_refuses_a_pod_without_command(tmp_path: Path) -> None:
    with pytest.raises(ExecError, match="has no command"):
        plan_process(pod(command=[]), tmp_path, master_port=1, base_env={})


# --- the lifecycle against a fake API ----------------------------------------------------------------------


class FakeApi:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        self.ready: list[str] = []
        self.removed: list[str] = []

    def exec_nodes(self) -> list[str]:
        return ["exec-0"]

    def mark_node_ready(self, name: str, now_rfc3339: str) -> None:
        self.ready.append(name)

    def job_pods(self, namespace: str = "") -> list[dict[str, Any]]:
        return list(self.pods.values())

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        for p in self.pods.values():
            if p["metadata"]["name"] == name:
                p["status"] = dict(status)

    def finish_deletion(self, namespace: str, name: str, uid: str) -> None:
        self.removed.append(name)
        self.pods.pop(uid, None)

    def delete(self, name: str, grace: int) -> None:
        p = next(p for p in self.pods.values() if p["metadata"]["name"] == name)
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        p["metadata"]["deletionGracePeriodSeconds"] = grace


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def run_until(emu: ExecEmulator, check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        emu.step()
        time.sleep(0.05)


def test_exit_codes_become_the_pod_phase(tmp_path: Path) -> None:
    ok = pod("ok-g1-0", command=["sh", "-c", "echo working; exit 0"])
    bad = pod("bad-g1-0", command=["sh", "-c", "echo 'train.py: error: no checkpoint dir' >&2; exit 2"])
    off = pod("off-g1-0", command=["sh", "-c", "exit 0"], node="kwok-node")  # not an exec node: untouched
    api = FakeApi([ok, bad, off])
    emu = ExecEmulator(api, ExecConfig(root=tmp_path), clock=Clock())
    out = emu.step()
    assert sorted(out.started) == ["team/bad-g1-0", "team/ok-g1-0"] and api.ready == ["exec-0"]
    assert ok["status"]["phase"] == "Running"
    run_until(emu, lambda: ok["status"]["phase"] != "Running" and bad["status"]["phase"] != "Running")
    assert ok["status"]["phase"] == "Succeeded"
    term = bad["status"]["containerStatuses"][0]["state"]["terminated"]
    assert bad["status"]["phase"] == "Failed" and term["exitCode"] == 2
    assert term["message"] == "train.py: error: no checkpoint dir"  # the one clear line
    assert off["status"] == {"phase": "Pending"}
    assert (tmp_path / "team" / "ok-g1-0" / "log").read_text() == "working\n"


def test_deletion_sends_sigterm_then_removes_the_pod(tmp_path: Path) -> None:
    p = pod(command=["sh", "-c", "trap 'echo checkpointed; exit 143' TERM; while :; do sleep 0.05; done"])
    api, clock = FakeApi([p]), Clock()
    emu = ExecEmulator(api, ExecConfig(root=tmp_path), clock=clock)
    emu.step()
    time.sleep(0.3)  # let the shell install its trap
    api.delete("job-g1-0", grace=30)
    out = emu.step()
    assert out.terminated == ["team/job-g1-0"] and api.removed == []
    run_until(emu, lambda: p["status"]["phase"] == "Failed")
    assert api.removed == []  # the final status lingers a moment, as a kubelet writes it before deleting
    clock.t += LINGER_S
    emu.step()
    assert api.removed == ["job-g1-0"]
    assert "checkpointed" in (tmp_path / "team" / "job-g1-0" / "log").read_text()


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    p = pod(command=["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"], grace=10)
    api, clock = FakeApi([p]), Clock()
    emu = ExecEmulator(api, ExecConfig(root=tmp_path), clock=clock)
    emu.step()
    time.sleep(0.3)
    api.delete("job-g1-0", grace=10)
    emu.step()
    clock.t += 5
    out = emu.step()
    assert out.killed == [] and emu.running == 1  # still inside the grace period
    clock.t += 5
    out = emu.step()
    assert out.killed == ["team/job-g1-0"]
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and term["reason"] == "Killed"
    clock.t += LINGER_S
    emu.step()
    assert api.removed == ["job-g1-0"]


def test_a_pod_that_cannot_run_fails_with_the_reason(tmp_path: Path) -> None:
    p = pod(command=[])
    api = FakeApi([p])
    out = ExecEmulator(api, ExecConfig(root=tmp_path), clock=Clock()).step()
    assert "has no command" in out.failed_to_start["team/job-g1-0"]
    assert p["status"]["phase"] == "Failed" and "has no command" in p["status"]["message"]


def test_a_running_pod_whose_process_is_gone_is_failed_not_restarted(tmp_path: Path) -> None:
    # an emulator restart: the pod says Running but no process of this emulator runs it
    p = pod(command=["sh", "-c", "exit 0"], phase="Running")
    api = FakeApi([p])
    out = ExecEmulator(api, ExecConfig(root=tmp_path), clock=Clock()).step()
    assert out.started == [] and p["status"]["phase"] == "Failed" and p["status"]["reason"] == "ExecLost"


def test_worker_site_links_the_reporters_packages_but_never_numpy(tmp_path: Path) -> None:
    import subprocess
    import sys

    from perfsched_dev.emulator.exec import find_torch_python, worker_site

    site = worker_site(tmp_path / "pylib")
    names = {p.name for p in site.iterdir()}
    assert {"scheduler", "pydantic", "pydantic_settings", "kubernetes", "orjson"} <= names
    assert "numpy" not in names and "torch" not in names
    # a worker under another Python of the same minor version imports the reporter through it, and its
    # own PyTorch and numpy still load
    python = find_torch_python() or sys.executable
    probe = "import scheduler.worker, scheduler.k8s.workload, scheduler.settings as s; s.Settings()"
    if python != sys.executable:
        probe += "; import torch; torch.zeros(2).numpy()"
    out = subprocess.run(
        [python, "-c", probe],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_workers_do_not_inherit_the_emulators_virtualenv(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from perfsched_dev.emulator import exec as ex

    monkeypatch.setattr(sys, "prefix", "/opt/venv")
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setenv("PATH", "/opt/venv/bin:/usr/bin:/bin")
    monkeypatch.setenv("PERFSCHED_NAMESPACE", "x")
    monkeypatch.setenv("VIRTUAL_ENV", "/opt/venv")
    env = ex._base_env("/k/config")
    assert env["PATH"] == "/usr/bin:/bin" and env["KUBECONFIG"] == "/k/config"
    assert "PERFSCHED_NAMESPACE" not in env and "VIRTUAL_ENV" not in env


def test_a_lost_running_status_is_written_again(tmp_path: Path) -> None:
    from scheduler.core.errors import TemporaryError

    class Flaky(FakeApi):
        failed = False

        def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
            if not self.failed:
                self.failed = True
                raise TemporaryError("503 the API server is busy")
            super().set_pod_status(namespace, name, status)

    p = pod(command=["sh", "-c", "sleep 2"])
    api = Flaky([p])
    emu = ExecEmulator(api, ExecConfig(root=tmp_path), clock=Clock())
    with pytest.raises(TemporaryError):
        emu.step()  # the process started; its status did not reach the API
    assert p["status"]["phase"] == "Pending" and emu.running == 1
    out = emu.step()
    assert out.started == [] and p["status"]["phase"] == "Running"  # the same process, reported now
    emu.shutdown()
