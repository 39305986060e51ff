"""The operator's webhook endpoint over TLS, and the namespace -> queue lookup it uses."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

import pytest

from scheduler.k8s.fakeapi import FakeKubeApi
from scheduler.operator.webhook_server import NamespaceQueues, serve_webhook


@pytest.fixture
def cert(tmp_path: Path) -> tuple[str, str]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", "k.pem", "-out", "c.pem", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    return str(tmp_path / "c.pem"), str(tmp_path / "k.pem")


def test_mutate_over_tls_triggers_a_round(cert: tuple[str, str]) -> None:
    triggered: list[bool] = []
    server, _ = serve_webhook("127.0.0.1", 0, *cert, lambda ns: "", on_admit=lambda: triggered.append(True))
    try:
        review = {
            "request": {
                "uid": "abc",
                "operation": "CREATE",
                "namespace": "ml",
                "kind": {"kind": "Job"},
                "object": {
                    "metadata": {"labels": {"perfsched.dev/queue": "q"}},
                    "spec": {"template": {"spec": {}}},
                },
            }
        }
        ctx = ssl.create_default_context(cafile=cert[0])
        req = urllib.request.Request(
            f"https://127.0.0.1:{server.server_port}/mutate",
            data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            answer = json.loads(resp.read())
        assert answer["response"]["uid"] == "abc"
        assert json.loads(base64.b64decode(answer["response"]["patch"]))[0]["path"] == "/spec/suspend"
        assert triggered == [True]
        bad = urllib.request.Request(
            f"https://127.0.0.1:{server.server_port}/mutate", data=b"{not json", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, context=ctx, timeout=10)
        assert err.value.code == 400
    finally:
        server.shutdown()


def test_namespace_queues_caches_for_ttl() -> None:
    t = [0.0]
    api = FakeKubeApi(lambda: 0.0)
    api.add_namespace("team-a-ns", {"team": "a"})
    api.add_trainingqueue(
        {"metadata": {"name": "team-a"}, "spec": {"namespaces": {"matchLabels": {"team": "a"}}}}
    )
    nq = NamespaceQueues(api, ttl_s=5.0, clock=lambda: t[0])
    assert (nq("team-a-ns"), nq("other")) == ("team-a", "")
    api.delete_trainingqueue("team-a")
    t[0] = 4.0
    assert nq("team-a-ns") == "team-a"  # cached
    t[0] = 6.0
    assert nq("team-a-ns") == ""
