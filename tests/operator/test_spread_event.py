"""A gang the operator starts over several NVLink domains says why in its Started Event and Admitted
condition, judged on the round's own view at the decision (``scheduler.core.spread``)."""

from __future__ import annotations

from typing import Any

from scheduler.policies import make_policy
from tests.operator.conftest import Harness, ScriptedPolicy, alloc, gpu_node, make_harness, trainingjob

GANG = {"max": 8, "gpusPerReplica": 1}
HALF = {"max": 1, "gpusPerReplica": 4}


def started(h: Harness, name: str) -> str:
    events = [m for _, r, m in h.api.events_for(name) if r == "Started"]
    assert len(events) == 1
    return events[0]


def admitted(h: Harness, name: str) -> dict[str, Any]:
    conds = h.api.status_of("ml", name)["conditions"]
    return next(c for c in conds if c["type"] == "Admitted")


def test_spread_because_the_round_gave_the_whole_domain_to_the_gang_ahead() -> None:
    policy = ScriptedPolicy({"ml/a": alloc("ml/a", "A100", 4, n1=1), "ml/b": alloc("ml/b", "A100", 4, n2=1)})
    h = make_harness(policy)
    for n in ("n1", "n2", "n3"):
        h.api.add_node(gpu_node(n))
    h.api.add_trainingjob(trainingjob("a", replicas=HALF))
    h.api.add_trainingjob(trainingjob("b", replicas=HALF))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.clock.advance(5)
    policy.want["ml/g1"] = alloc("ml/g1", "A100", 1, n3=8)
    policy.want["ml/g2"] = alloc("ml/g2", "A100", 1, n1=4, n2=4)
    h.api.add_trainingjob(trainingjob("g1", replicas=GANG))
    h.api.add_trainingjob(trainingjob("g2", replicas=GANG))
    op.run_round()
    note = "spread over 2 NVLink domains: no A100 NVLink domain had 8 free GPUs at the decision"
    assert "spread" not in started(h, "g1")
    assert started(h, "g2").endswith(f"; {note}")
    assert admitted(h, "g2")["message"].endswith(note)


def test_a_spread_start_while_a_domain_was_whole_is_named() -> None:
    h = make_harness(ScriptedPolicy({"ml/g": alloc("ml/g", "A100", 1, n1=4, n2=4)}))
    for n in ("n1", "n2", "n3"):
        h.api.add_node(gpu_node(n))
    h.api.add_trainingjob(trainingjob("g", replicas=GANG))
    h.operator().run_round()
    assert started(h, "g").endswith(
        "; spread over 2 NVLink domains although 3 A100 NVLink domains had 8 free GPUs at the decision: "
        "n1 (8), n2 (8), n3 (8)"
    )


def test_fifo_starts_gangs_in_one_domain_while_one_is_whole() -> None:
    h = make_harness(make_policy("fifo"))
    for n in ("n1", "n2"):
        h.api.add_node(gpu_node(n))
    for name in ("g1", "g2"):
        h.api.add_trainingjob(trainingjob(name, replicas=GANG))
    h.operator().run_round()
    for name in ("g1", "g2"):
        assert "spread" not in started(h, name)
        assert len(h.api.status_of("ml", name)["allocation"]["nodes"]) == 1
