"""Leader election on a Lease: one leader at a time, takeover after expiry, fencing of a stale leader.

Two candidates share one fake API server; each has its own fake monotonic clock (they need not agree).
"""

from __future__ import annotations

from scheduler.core.errors import TemporaryError
from scheduler.k8s.fakeapi import FakeKubeApi
from scheduler.operator.leader import LeaseElector
from tests.operator.conftest import FakeClock, gpu_node, make_harness, trainingjob


def electors(api: FakeKubeApi) -> tuple[LeaseElector, LeaseElector, FakeClock, FakeClock]:
    ca, cb = FakeClock(100.0), FakeClock(5000.0)  # unrelated monotonic clocks
    kw = {"namespace": "kube-system", "name": "perfsched-operator", "lease_duration_s": 15.0}
    kw2 = {"renew_deadline_s": 10.0, "retry_period_s": 2.0}
    a = LeaseElector(api, identity="a", monotonic=ca.now, wall=ca.now, **kw, **kw2)  # type: ignore[arg-type]
    b = LeaseElector(api, identity="b", monotonic=cb.now, wall=cb.now, **kw, **kw2)  # type: ignore[arg-type]
    return a, b, ca, cb


def test_only_one_candidate_leads() -> None:
    api = FakeKubeApi(lambda: 0.0)
    a, b, _, _ = electors(api)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.is_leader() and not b.is_leader()
    assert api.leases[("kube-system", "perfsched-operator")]["spec"]["holderIdentity"] == "a"


def test_takeover_only_after_the_lease_expired_on_the_followers_clock() -> None:
    api = FakeKubeApi(lambda: 0.0)
    a, b, ca, cb = electors(api)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()  # b first sees a's record at its t=5000
    # a stops renewing (crashed or partitioned)
    ca.advance(10.0)  # renew deadline 10 s reached on a's clock: a stops acting
    assert not a.is_leader()
    cb.advance(14.0)  # 14 s < 15 s lease duration on b's clock: still a's
    assert b.try_acquire_or_renew() is False
    cb.advance(1.5)  # 15.5 s unchanged: expired
    assert b.try_acquire_or_renew() is True
    spec = api.leases[("kube-system", "perfsched-operator")]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    # a comes back: the record changed, so it must wait a full lease duration again
    assert a.try_acquire_or_renew() is False


def test_renewals_keep_the_leader_and_a_renewal_failure_fences_it_at_the_deadline() -> None:
    api = FakeKubeApi(lambda: 0.0)
    a, b, ca, cb = electors(api)
    for _ in range(10):  # 20 s of renewals every 2 s
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        ca.advance(2.0)
        cb.advance(2.0)
    api.fail_next("get_lease", TemporaryError("apiserver down"), times=100)
    assert a.try_acquire_or_renew() is True  # 2 s since the last renewal: still leading
    ca.advance(8.5)  # 10.5 s since the last renewal > 10 s deadline
    assert a.try_acquire_or_renew() is False
    assert not a.is_leader()


def test_racing_candidates_elect_one() -> None:
    api = FakeKubeApi(lambda: 0.0)
    a, b, _, cb = electors(api)
    c = LeaseElector(
        api, namespace="kube-system", name="perfsched-operator", identity="c", monotonic=cb.now, wall=cb.now
    )
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    c.try_acquire_or_renew()
    cb.advance(16.0)  # a is gone; b and c both see the lease expired
    stale = api.get_lease("kube-system", "perfsched-operator")
    assert b.try_acquire_or_renew() is True
    # c read the lease before b's write landed: its replace carries a stale resourceVersion
    real_get = api.get_lease
    api.get_lease = lambda ns, name: stale  # type: ignore[method-assign]
    assert c.try_acquire_or_renew() is False
    api.get_lease = real_get  # type: ignore[method-assign]
    assert api.leases[("kube-system", "perfsched-operator")]["spec"]["holderIdentity"] == "b"
    assert b.is_leader() and not c.is_leader()


def test_release_hands_over_at_once() -> None:
    api = FakeKubeApi(lambda: 0.0)
    a, b, _, _ = electors(api)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader()
    assert b.try_acquire_or_renew() is True


def test_operator_that_is_not_leader_writes_nothing() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    h.leader[0] = False
    rep = h.operator().run_round()
    assert rep.skipped
    assert h.api.calls == [] and h.api.events == []


def test_leadership_lost_mid_round_stops_writing_at_the_next_call() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("a"))
    h.api.add_trainingjob(trainingjob("b"))
    checks = {"n": 0}

    def may_act() -> bool:
        checks["n"] += 1
        return checks["n"] <= 3  # round start, status patch of job a, its Started event, then lost

    from dataclasses import replace

    from scheduler.operator.reconcile import Operator

    # one job after the other, so the order of writes is defined
    cfg = replace(h.config, api_concurrency=1)
    op = Operator(h.api, h.policy, h.oracle, config=cfg, clock=h.clock, may_act=may_act)
    rep = op.run_round()
    assert rep.skipped
    # job a's intent and the Event saying so went out; then nothing: no pod, no service, nothing for b
    assert [c[0] for c in h.api.calls] == ["patch_status"]
    assert [r for _, r, _ in h.api.events_for("a")] == ["Started"]
    assert not h.api.pods and not h.api.services and not h.api.events_for("b")
