"""``ProgressReporter`` through API server outages, over real HTTP: a port nothing listens on, then a
small HTTP server playing the API server's pod endpoints comes up on it.

The reporter's clock and sleep are fake, so an outage of 60 s of the reporter's time takes well under a
second; the failures are real ones (``ECONNREFUSED`` through the official client and urllib3).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from perfsched_dev.devcluster.process import free_ports
from scheduler.k8s.errors import ApiUnavailable
from scheduler.k8s.progress import ProgressReport, parse_progress
from scheduler.k8s.workload import KubeWorkload
from scheduler.worker import ProgressReporter

POD_PATH = "/api/v1/namespaces/team/pods/job-g1-0"


class PodServer:
    """The two pod endpoints the reporter uses (GET and merge PATCH of one pod), on a fixed port."""

    def __init__(self, port: int, annotations: dict[str, str] | None = None) -> None:
        self.port = port
        self.annotations = dict(annotations or {})
        self.patches: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    def _pod(self) -> bytes:
        return json.dumps(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-g1-0", "namespace": "team",
                                                             "annotations": self.annotations}}
        ).encode()  # fmt: skip

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.split("?")[0] == POD_PATH:
                    self._answer(200, owner._pod())
                else:
                    self._answer(404, b'{"kind":"Status","code":404,"message":"not found"}')

            def do_PATCH(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.patches.append(body)
                owner.annotations.update(body["metadata"]["annotations"])
                self._answer(200, owner._pod())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def last(self) -> ProgressReport | None:
        return parse_progress(self.annotations.get("perfsched.dev/progress"))


class Clock:
    """Fake time: ``sleep`` advances it."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def port() -> int:
    return free_ports(1)[0]


@pytest.fixture
def server(port: int) -> Iterator[PodServer]:
    srv = PodServer(port, {"perfsched.dev/start-progress": "500"})
    yield srv
    srv.stop()


def workload(port: int) -> KubeWorkload:
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.retries = 0  # one connection attempt per call: the test counts calls
    return KubeWorkload(k8s.ApiClient(cfg), request_timeout_s=2.0)


def test_a_refused_connection_is_an_api_unavailable_error_not_a_urllib3_one(port: int) -> None:
    with pytest.raises(ApiUnavailable, match="annotating pod team/job-g1-0: API server unreachable"):
        workload(port).annotate_pod("team", "job-g1-0", {"a": "b"})
    with pytest.raises(ApiUnavailable, match="listing TrainingJob pods"):
        workload(port).list_job_pods()


def test_reporter_against_a_refused_port_never_raises_then_sends_the_latest_when_the_server_is_up(
    port: int, server: PodServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    rep = ProgressReporter(
        "job-g1-0", "team", min_interval_s=10.0, api=workload(port), clock=clock, sleep=clock.sleep,
        start_timeout_s=5.0,
    )  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="scheduler.worker")
    # nothing listens: start_progress retries for start_timeout_s, then falls back to 0 (no env var)
    assert rep.start_progress() == 0.0
    assert not rep.report(100.0)
    assert not rep.checkpoint(150.0)  # kept, not raised
    clock.t += 5
    assert not rep.report(200.0)
    assert rep.pending
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "not sent" in r.message]
    assert len(warnings) == 1  # once per outage, not once per report

    server.start()
    clock.t += rep.max_retry_s
    assert rep.report(250.0)
    # the latest progress, with the checkpoint made during the outage
    last = server.last()
    assert last is not None and (last.progress, last.checkpoint, last.time) == (250.0, 150.0, clock.t)
    assert not rep.pending
    assert any("get through again" in r.message for r in caplog.records)
    assert rep.start_progress() == 500.0  # the server is back: the operator's annotation


def test_a_training_loop_keeps_running_through_a_60_s_outage(port: int, server: PodServer) -> None:
    """A script that reports every step (0.5 s each) and checkpoints every 40 s trains on while the API
    server is gone for 60 s; afterwards its pod carries the latest progress and checkpoint, and finish
    reports the total. The reporter never blocks the loop on a dead server for more than a few calls."""
    clock = Clock()
    server.start()
    api = workload(port)
    calls = {"n": 0}
    real_annotate = api.annotate_pod

    def counted(namespace: str, name: str, annotations: Any) -> None:
        calls["n"] += 1
        real_annotate(namespace, name, annotations)

    api.annotate_pod = counted  # type: ignore[method-assign]
    rep = ProgressReporter("job-g1-0", "team", min_interval_s=10.0, api=api, clock=clock, sleep=clock.sleep)
    first = int(rep.start_progress())
    assert first == 500
    outage = (clock.t + 30.0, clock.t + 90.0)  # 60 s without an API server, from t+30 s
    calls_in_outage = 0
    for step in range(first, first + 300):  # 300 steps of 0.5 s: 150 s of training
        if outage[0] <= clock.t < outage[1] and server._server is not None:
            server.stop()
            before = calls["n"]
        if clock.t >= outage[1] and server._server is None:
            calls_in_outage = calls["n"] - before
            server.start()
        clock.t += 0.5  # one training step
        rep.report(step + 1)
        if (step + 1) % 80 == 0:  # a checkpoint every 80 steps = 40 s
            rep.checkpoint(step + 1)
    assert server._server is not None  # the outage happened and ended while the loop ran
    # back-off: 2, 4, 8, 16, 30 s between attempts -> 6 attempts in 60 s, not 120 reports
    assert 1 <= calls_in_outage <= 8, calls_in_outage
    assert rep.finish(800.0)
    last = server.last()
    assert last is not None and (last.progress, last.checkpoint) == (800.0, 800.0)


def test_finish_retries_for_a_bounded_time_then_returns(port: int, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    rep = ProgressReporter(
        "job-g1-0", "team", min_interval_s=0, api=workload(port), clock=clock, sleep=clock.sleep,
        finish_timeout_s=60.0,
    )  # fmt: skip
    start = clock.t
    assert rep.finish(1000.0) is False  # nothing listens: gives up, never raises
    assert 60.0 <= clock.t - start <= 61.0
    assert any(r.levelno == logging.ERROR and "final progress report" in r.message for r in caplog.records)


def test_finish_gets_through_when_the_server_comes_back_in_time(port: int, server: PodServer) -> None:
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.t - start >= 20 and server._server is None:
            server.start()  # the API server is back 20 s into finish

    rep = ProgressReporter(
        "job-g1-0", "team", min_interval_s=0, api=workload(port), clock=clock, sleep=sleep,
        finish_timeout_s=60.0,
    )  # fmt: skip
    start = clock.t
    assert rep.finish(1000.0) is True
    last = server.last()
    assert last is not None and (last.progress, last.checkpoint) == (1000.0, 1000.0)
    assert clock.t - start < 60.0


def test_start_progress_falls_back_to_the_operators_environment_variable(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the operator sets PERFSCHED_START_PROGRESS on every pod it creates, with the annotation's number
    monkeypatch.setenv("PERFSCHED_START_PROGRESS", "1200")
    clock = Clock()
    rep = ProgressReporter(
        "job-g1-0", "team", api=workload(port), clock=clock, sleep=clock.sleep, start_timeout_s=20.0
    )
    assert rep.start_progress() == 1200.0
    assert 20.0 <= clock.t - 1000.0 <= 21.0  # it tried the API for start_timeout_s first
