"""The one kubeconfig loader: which configuration it picks, and the ``ConfigError`` a bad one gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsched_dev.devcluster.configs import kubeconfig_text
from scheduler.core.errors import ConfigError
from scheduler.k8s.connect import POOL_MAXSIZE, api_client

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / f"kubeconfig-{server.rsplit(':', 1)[1]}"
    path.write_text(kubeconfig_text(server, "tok", CA))
    return path


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_an_explicit_kubeconfig_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, "https://127.0.0.1:6001")))
    explicit = _kubeconfig(tmp_path, "https://127.0.0.1:6002")
    for given in (explicit, str(explicit)):
        api = api_client(given)
        assert api.configuration.host == "https://127.0.0.1:6002"
        assert api.configuration.api_key["authorization"] == "Bearer tok"
        assert api.configuration.connection_pool_maxsize >= POOL_MAXSIZE
    assert api_client().configuration.host == "https://127.0.0.1:6001"  # $KUBECONFIG without one


def test_home_kubeconfig_is_the_last_resort(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True)
    _kubeconfig(tmp_path, "https://127.0.0.1:6003").rename(home / "config")
    assert api_client().configuration.host == "https://127.0.0.1:6003"


def test_a_missing_or_broken_kubeconfig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load kubeconfig /nonexistent/kubeconfig"):
        api_client("/nonexistent/kubeconfig")
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(ConfigError, match=f"cannot load kubeconfig {broken}"):
        api_client(broken)
    with pytest.raises(ConfigError, match="no kubeconfig: set KUBECONFIG"):
        api_client()
