"""``perfsched dev-cluster`` as a user runs it: up from a clean state, status, a refused second up, down
leaving no process and no port behind; and a start that fails part-way leaving nothing running.

These start their own clusters (separate state directories), beside the session cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from e2e.harness import REPO, wait_until
from perfsched_dev.devcluster.process import ProcessRecord, is_running, port_is_free
from scheduler.k8s import connect

SPEC = str(REPO / "e2e" / "clusters" / "e2e-small.yaml")


def perfsched(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _processes_with_cwd_under(path: Path) -> list[int]:
    """Pids of live processes whose working directory is inside ``path`` (our components run in run/)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cwd.startswith(str(path)) and state not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def test_up_status_second_up_and_down_from_a_clean_state(tmp_path: Path) -> None:
    state_dir = tmp_path / "dc"
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(state_dir)}

    t0 = time.monotonic()
    up = perfsched("dev-cluster", "up", "--cluster", SPEC, "--json", env=env)
    up_seconds = time.monotonic() - t0
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    print(f"dev-cluster up to healthy: {info['ready_seconds']} s ({up_seconds:.1f} s with the CLI)")
    try:
        assert info["phase"] == "running"
        assert Path(info["kubeconfig"]) == state_dir / "kubeconfig"
        names = set(info["pids"])
        assert names == {
            "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler-perfsched",
            "kube-scheduler-default", "kwok",
        }  # fmt: skip
        assert all(Path(p).is_file() for p in info["logs"].values())
        api = connect.api_client(info["kubeconfig"])
        from kubernetes import client as k8s

        assert len(k8s.CoreV1Api(api).list_node().items) == 6
        api.close()

        status = perfsched("dev-cluster", "status", "--json", env=env)
        assert status.returncode == 0
        assert json.loads(status.stdout)["pids"] == info["pids"]

        again = perfsched("dev-cluster", "up", "--cluster", SPEC, env=env)
        assert again.returncode == 1
        assert "already running" in again.stderr
        assert (
            json.loads(perfsched("dev-cluster", "status", "--json", env=env).stdout)["pids"] == info["pids"]
        )
    finally:
        down = perfsched("dev-cluster", "down", "--json", env=env)
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout)["stopped"]) == names

    records = [ProcessRecord.from_json(p) for p in info["processes"]]
    assert not [r.name for r in records if is_running(r)]
    assert not _processes_with_cwd_under(state_dir)
    listening = {k: v for k, v in info["ports"].items() if k not in ("extender",)}
    assert [k for k, port in listening.items() if not port_is_free(port)] == []
    assert not (state_dir / "state.json").exists()
    assert not (state_dir / "kubeconfig").exists()
    assert not (state_dir / "run").exists()
    assert all(not Path(d).exists() for d in info["temp_dirs"])
    assert (state_dir / "logs" / "kube-apiserver.log").is_file()  # kept for post-mortems

    gone = perfsched("dev-cluster", "status", "--json", env=env)
    assert gone.returncode == 3
    assert json.loads(gone.stdout)["phase"] == "absent"


def test_a_component_failing_at_start_is_reported_and_nothing_is_left_running(tmp_path: Path) -> None:
    from perfsched_dev.devcluster.tools import find_tools

    real = find_tools()
    bins = tmp_path / "bin"
    bins.mkdir()
    fake = bins / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'fake apiserver: refusing to start' >&2\nexit 1\n")
    fake.chmod(0o755)
    (bins / "kube-controller-manager").symlink_to(real.kube_controller_manager)
    (bins / "kube-scheduler").symlink_to(real.kube_scheduler)
    state_dir = tmp_path / "dc"
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(state_dir), "PERFSCHED_K8S_BIN_DIR": str(bins)}

    up = perfsched("dev-cluster", "up", "--cluster", SPEC, env=env)
    assert up.returncode == 1
    assert "kube-apiserver exited during start-up" in up.stderr
    assert "fake apiserver: refusing to start" in up.stderr  # the log tail says why
    assert "Traceback" not in up.stderr
    # etcd had started before the apiserver failed: it must be gone, and so must the state
    assert (state_dir / "logs" / "etcd.log").is_file()
    assert not _processes_with_cwd_under(state_dir)
    assert not (state_dir / "state.json").exists()
    assert perfsched("dev-cluster", "status", env=env).returncode == 3


def test_up_with_perfsched_runs_a_trainingjob_to_success(tmp_path: Path) -> None:
    from kubernetes import client as k8s

    state_dir = tmp_path / "dc"
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(state_dir)}
    up = perfsched(
        "dev-cluster", "up", "--cluster", SPEC, "--with-perfsched", "--time-scale", "200", "--json", env=env
    )
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        assert {"perfsched-extender", "perfsched-operator", "perfsched-emulator"} <= set(info["pids"])
        api = connect.api_client(info["kubeconfig"])
        custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
        job = {
            "apiVersion": "perfsched.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "rn50"},
            "spec": {
                "model": "resnet50",
                "dataset": "imagenet",
                "batchSize": 256,
                "work": {"iterations": 3000},
                "replicas": {"max": 2, "gpusPerReplica": 4},
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "x"}]}
                },
            },
        }
        custom.create_namespaced_custom_object("perfsched.dev", "v1alpha1", "default", "trainingjobs", job)

        def phase() -> str:
            obj = custom.get_namespaced_custom_object(
                "perfsched.dev", "v1alpha1", "default", "trainingjobs", "rn50"
            )
            return str((obj.get("status") or {}).get("phase", ""))

        wait_until(lambda: phase() == "Succeeded", 120, "the TrainingJob to succeed")
        pods = core.list_namespaced_pod("default", label_selector="perfsched.dev/job-name=rn50").items
        assert len(pods) == 2
        assert all(p.status.phase == "Succeeded" and p.spec.node_name for p in pods)
        assert all(p.spec.scheduler_name == "perfsched" for p in pods)
        api.close()
    finally:
        down = perfsched("dev-cluster", "down", env=env)
        assert down.returncode == 0, down.stderr
    assert not _processes_with_cwd_under(state_dir)
