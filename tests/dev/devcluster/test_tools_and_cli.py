"""Missing tools and bad input fail before anything starts, with a message that says how to fix it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsched_dev.devcluster.tools import DevClusterError, find_tools

REPO = Path(__file__).resolve().parents[3]


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_find_tools_lists_every_missing_binary_with_the_fix(tmp_path: Path) -> None:
    env = {
        "PERFSCHED_CACHE": str(tmp_path / "cache"),
        "PERFSCHED_ETCD_BIN": str(tmp_path / "no-etcd"),
    }
    with pytest.raises(DevClusterError) as err:
        find_tools(env)
    msg = str(err.value)
    for tool in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        assert f"{tool}" in msg
    assert msg.count("make tools") == 5


def test_find_tools_prefers_the_built_etcd_over_the_path(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for rel in ("etcd-v3.6.16/etcd", "k8s-v1.37.2/kube-apiserver", "k8s-v1.37.2/kube-controller-manager",
                "k8s-v1.37.2/kube-scheduler", "kwok-v0.8.0/kwok"):  # fmt: skip
        path = cache / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    tools = find_tools({"PERFSCHED_CACHE": str(cache)})
    assert tools.etcd == cache / "etcd-v3.6.16" / "etcd"
    assert tools.kwok_stages == REPO / "e2e" / "kwok-stages.yaml"
    assert tools.crds_dir == REPO / "crds"


def test_up_without_tools_exits_1_with_the_fix_and_starts_nothing(tmp_path: Path) -> None:
    state = tmp_path / "dc"
    env = {
        **os.environ,
        "PERFSCHED_DEV_CLUSTER_DIR": str(state),
        "PERFSCHED_K8S_BIN_DIR": str(tmp_path / "none"),
    }
    out = _run("dev-cluster", "up", "--cluster", "homogeneous-64xV100", env=env)
    assert out.returncode == 1
    assert "kube-apiserver not found" in out.stderr
    assert "make tools" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (state / "state.json").exists()


def test_an_unbuilt_kubernetes_version_names_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError) as err:
        find_tools({"PERFSCHED_CACHE": str(tmp_path)}, k8s_version="v1.99.0")
    assert f"kube-apiserver not found at {tmp_path}/k8s-v1.99.0/kube-apiserver" in str(err.value)
    assert "run `PERFSCHED_K8S_VERSION=v1.99.0 bash e2e/install-tools.sh` to build it" in str(err.value)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (("--gpu-api", "nvml"), "--gpu-api: expected one of device-plugin, dra, mixed, got 'nvml'"),
        (("--k8s-version", "1.37"), "--k8s-version: expected a version like v1.37.2, got '1.37'"),
    ],
)
def test_bad_gpu_api_or_version_is_a_usage_error(tmp_path: Path, flag: tuple[str, str], message: str) -> None:
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(tmp_path / "dc")}
    out = _run("dev-cluster", "up", *flag, env=env)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_up_with_an_unknown_cluster_spec_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(tmp_path / "dc")}
    out = _run("dev-cluster", "up", "--cluster", "no-such-spec", env=env)
    assert out.returncode == 2
    assert "no-such-spec" in out.stderr


def test_status_and_down_without_a_cluster(tmp_path: Path) -> None:
    env = {**os.environ, "PERFSCHED_DEV_CLUSTER_DIR": str(tmp_path / "dc")}
    status = _run("dev-cluster", "status", "--json", env=env)
    assert status.returncode == 3
    assert json.loads(status.stdout)["phase"] == "absent"
    down = _run("dev-cluster", "down", env=env)
    assert down.returncode == 0
    assert "no dev cluster running" in down.stdout


def test_install_tools_without_go_says_so_and_fails(tmp_path: Path) -> None:
    # a PATH with the basic tools but no Go, and an empty cache: nothing can be built
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sed", "awk", "dirname", "id", "mkdir", "rm", "grep", "cut", "cat", "env"):
        src = subprocess.run(
            ["bash", "-c", f"command -v {tool}"], capture_output=True, text=True
        ).stdout.strip()
        if src:
            (bin_dir / tool).symlink_to(src)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PERFSCHED_CACHE": str(tmp_path / "cache")}
    out = subprocess.run(
        [str(bin_dir / "bash"), str(REPO / "e2e" / "install-tools.sh")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "Go is not installed" in out.stderr
    assert "https://go.dev/doc/install" in out.stderr


def test_with_perfsched_names_a_missing_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from perfsched_dev.commands import devcluster as cmd

    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "scheduler.commands.operator" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(DevClusterError, match="perfsched operator"):
        cmd._perfsched_components(8123, "/k", None)


def test_with_perfsched_starts_the_three_components_on_the_cluster() -> None:
    from perfsched_dev.commands import devcluster as cmd

    extender, operator, emulator = cmd._perfsched_components(8123, "/k/kubeconfig", 60.0)
    assert extender.argv[-7:] == (
        "extender",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--kubeconfig",
        "/k/kubeconfig",
    )
    assert extender.health_url == "http://127.0.0.1:8123/readyz"
    assert operator.argv[-3:] == ("operator", "--kubeconfig", "/k/kubeconfig")
    assert operator.health_url.endswith("/healthz")
    assert operator.env["PERFSCHED_OPERATOR_METRICS_HOST"] == "127.0.0.1"
    assert emulator.argv[-3:] == ("emulate", "--kubeconfig", "/k/kubeconfig")
    assert emulator.env == {"PERFSCHED_EMULATOR_TIME_SCALE": "60"}


def test_the_dev_commands_are_declared_as_cli_plugins() -> None:
    import tomllib

    import typer

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    plugins = declared["perfsched.commands"]
    assert set(plugins) == {"dev-cluster", "demo", "emulate"}
    app = typer.Typer()
    for target in plugins.values():
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func)(app)
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert names == {"dev-cluster", "demo", "emulate"}
