"""The operator process loop: rounds on watch events, nothing while standby, Lease released on stop,
``/healthz`` and ``/metrics`` served."""

from __future__ import annotations

import threading
import time

import httpx

from scheduler import metrics
from scheduler.k8s.fakeapi import FakeKubeApi
from scheduler.operator.leader import LeaseElector
from scheduler.operator.loop import OperatorLoop, serve_http
from scheduler.operator.reconcile import Operator, OperatorConfig
from scheduler.oracles.learning import CorrectedOracle
from scheduler.policies import make_policy
from tests.operator.conftest import RecordingOracle, gpu_node, trainingjob


def _wait(cond, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_a_new_job_is_started_by_an_event_long_before_the_period() -> None:
    api = FakeKubeApi(time.time)
    api.add_node(gpu_node("n1", 8))
    elector = LeaseElector(
        api,
        namespace="ops",
        name="lease",
        identity="me",
        lease_duration_s=3,
        renew_deadline_s=2,
        retry_period_s=0.1,
    )
    op = Operator(api, make_policy("fifo"), RecordingOracle(), may_act=elector.is_leader)
    loop = OperatorLoop(op, api, elector=elector, period_s=60.0, min_interval_s=0.0, watch_timeout_s=1)
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    t.start()
    try:
        assert _wait(elector.is_leader)
        time.sleep(0.2)  # the watches are connected
        api.add_trainingjob(trainingjob("bert"))  # the watch event wakes the loop: no 60 s wait
        assert _wait(lambda: len(api.job_pods("ml", "bert")) == 2)
        assert loop.healthy()
    finally:
        stop.set()
        loop.trigger()
        t.join(timeout=10)
    assert not t.is_alive()
    # released on the way out: a standby can take over at once
    assert api.leases[("ops", "lease")]["spec"]["holderIdentity"] == ""


def test_a_standby_runs_no_round() -> None:
    api = FakeKubeApi(time.time)
    api.add_node(gpu_node("n1", 8))
    api.add_trainingjob(trainingjob("bert"))
    op = Operator(api, make_policy("fifo"), RecordingOracle(), may_act=lambda: False)
    loop = OperatorLoop(op, api, period_s=0.02, min_interval_s=0.0)
    loop.is_leader = lambda: False  # type: ignore[method-assign]
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop, ()), daemon=True)
    t.start()
    time.sleep(0.3)
    stop.set()
    t.join(timeout=5)
    assert loop.rounds == 0 and api.calls == []


def test_a_process_that_regains_the_lease_restores_the_learning_state_again() -> None:
    # lead (no state yet: missing, then written), stand by while another leader could write, lead again:
    # the state is read back before the next round (a process that kept its own would write over it)
    api = FakeKubeApi(time.time)
    api.add_node(gpu_node("n1", 8))
    leading = [True]
    config = OperatorConfig(
        learning_state_configmap="ls", learning_state_namespace="ops", learning_state_interval_s=0.0
    )
    op = Operator(api, make_policy("fifo"), CorrectedOracle.load(), config=config, may_act=lambda: leading[0])
    loop = OperatorLoop(op, api, period_s=0.02, min_interval_s=0.0)
    loop.is_leader = lambda: leading[0]  # type: ignore[method-assign]
    restored = metrics.LEARNING_STATE_RESTORES.labels(outcome="restored")
    before = restored._value.get()
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop, ()), daemon=True)
    t.start()
    try:
        assert _wait(lambda: ("ops", "ls") in api.configmaps)
        leading[0] = False
        rounds = loop.rounds
        time.sleep(0.2)
        assert loop.rounds == rounds and restored._value.get() == before
        leading[0] = True
        assert _wait(lambda: loop.rounds > rounds)
    finally:
        stop.set()
        loop.trigger()
        t.join(timeout=10)
    assert restored._value.get() == before + 1


def test_http_serves_health_and_metrics() -> None:
    healthy = [True]
    server, _ = serve_http("127.0.0.1", 0, lambda: healthy[0])
    port = server.server_address[1]
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        healthy[0] = False
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 503
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "perfsched_operator_rounds_total" in body
        assert httpx.get(f"http://127.0.0.1:{port}/nope").status_code == 404
    finally:
        server.shutdown()


def test_the_operator_survives_an_api_outage_and_picks_up_where_it_was(caplog) -> None:  # type: ignore[no-untyped-def]
    """API server gone for a while: no traceback, one log line per outage, /readyz says so, the leader
    steps down (it cannot renew) and takes over again after; jobs started before keep their one gang,
    and a job created after the outage starts."""
    import logging

    from scheduler.k8s.errors import ApiHealth

    api = FakeKubeApi(time.time)
    api.add_node(gpu_node("n1", 8))
    api.add_node(gpu_node("n2", 8))
    api.add_trainingjob(trainingjob("bert"))
    elector = LeaseElector(
        api, namespace="ops", name="lease", identity="me",
        lease_duration_s=0.6, renew_deadline_s=0.4, retry_period_s=0.05,
    )  # fmt: skip
    counted: list[float] = []
    health = ApiHealth("operator", count=counted.append)
    op = Operator(api, make_policy("fifo"), RecordingOracle(), may_act=elector.is_leader)
    loop = OperatorLoop(
        op, api, elector=elector, period_s=0.05, min_interval_s=0.0, watch_timeout_s=1, health=health,
        max_watch_backoff_s=0.1,
    )  # fmt: skip
    caplog.set_level(logging.DEBUG)
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    t.start()
    try:
        assert _wait(lambda: len(api.job_pods("ml", "bert")) == 2)
        assert loop.not_ready() == ""
        api.unreachable = True
        assert _wait(lambda: not elector.is_leader())  # renew deadline passed: stops acting
        time.sleep(0.5)  # many rounds, lease attempts and watch reconnects fail meanwhile
        assert t.is_alive() and loop.healthy()  # /healthz stays 200: a restart would not help
        assert loop.not_ready().startswith("API server unreachable for")
        rounds_in_outage = loop.rounds
        api.unreachable = False
        api.add_trainingjob(trainingjob("gpt"))
        assert _wait(lambda: len(api.job_pods("ml", "gpt")) == 2)
        assert _wait(lambda: loop.not_ready() == "")  # ready again once that round is done
    finally:
        stop.set()
        loop.trigger()
        t.join(timeout=10)
    assert not t.is_alive()
    assert len(api.job_pods("ml", "bert")) == 2  # the gang started before the outage was left alone
    assert loop.rounds > rounds_in_outage
    down = [r for r in caplog.records if "API server unavailable" in r.getMessage()]
    assert len(down) == 1, [r.getMessage() for r in down]
    assert sum(1 for r in caplog.records if "available again" in r.getMessage()) == 1
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks"
    assert health.outages == 1 and 0.5 <= sum(counted) <= 5.0


def test_a_queue_spec_change_triggers_a_round_and_a_status_write_does_not() -> None:
    api = FakeKubeApi(time.time)
    api.add_node(gpu_node("n1", 8))
    api.add_trainingqueue(
        {"metadata": {"name": "team"}, "spec": {"quotas": [{"gpuType": "*", "nominal": 0}]}}
    )
    api.add_trainingjob(trainingjob("bert", queue="team"))
    op = Operator(api, make_policy("fifo"), RecordingOracle())
    loop = OperatorLoop(op, api, period_s=60.0, min_interval_s=0.0, watch_timeout_s=1)
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    t.start()
    try:
        loop.trigger()
        # the queue owns nothing: bert waits on its quota
        assert _wait(lambda: (api.status_of("ml", "bert") or {}).get("reason") == "QueueQuota")
        time.sleep(0.3)  # the watches are connected, the round's own status writes are seen
        rounds = loop.rounds
        api.patch_trainingqueue_status("team", {"pendingJobs": 7})  # a status write: no round
        time.sleep(0.3)
        assert loop.rounds == rounds
        # the admin gives the queue 8 GPUs: the spec change wakes the loop, no 60 s wait
        api.add_trainingqueue(
            {"metadata": {"name": "team"}, "spec": {"quotas": [{"gpuType": "*", "nominal": 8}]}}
        )
        assert _wait(lambda: len(api.job_pods("ml", "bert")) == 2)
    finally:
        stop.set()
        loop.trigger()
        t.join(timeout=10)
    assert not t.is_alive()
