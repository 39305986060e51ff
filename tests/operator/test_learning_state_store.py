"""The learning state kept in a ConfigMap: written by the leader, restored by a new operator process.

Order on a new leader: restore the state, then replay from TrainingJob status only the finished jobs the
state had not learnt; a live job's report already learnt is not learnt again. A state that cannot be
used (missing, corrupt, another schema or offline model) is logged with the reason and ignored.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import zlib

import pytest

from scheduler import metrics
from scheduler.core.types import Job, PlacementShape
from scheduler.operator import learning_state
from scheduler.operator.learning_state import KEY, SCHEMA, StateStore, decode, encode
from scheduler.operator.reconcile import Operator
from scheduler.oracles.learning import CorrectedOracle
from tests.operator.conftest import Harness, gpu_node, make_harness, trainingjob

NS, CM = "perfsched", "perfsched-learning"
QUESTION = [
    (Job(name="ml/new", submit_time=0, total_work=1000, model="resnet50", batch_size=256), shape)
    for shape in (PlacementShape("A100", 4, gpus_per_node=4), PlacementShape("A100", 1))
]


def _harness(interval: float = 0.0) -> Harness:
    h = make_harness(
        learning_state_configmap=CM, learning_state_namespace=NS, learning_state_interval_s=interval
    )
    h.oracle = CorrectedOracle.load()  # type: ignore[assignment]
    h.api.add_node(gpu_node("n1", 8))
    for k in range(4):
        h.api.add_trainingjob(trainingjob(f"j{k}", replicas={"min": 1, "max": 1, "gpusPerReplica": 2}))
    return h


def _report(h: Harness, name: str, throughput: float, progress: float) -> None:
    h.api.report_progress(
        "ml",
        f"{name}-g1-0",
        progress=progress,
        checkpoint=progress,
        throughput=throughput,
        time=h.clock.now(),
    )


def _taught(h: Harness) -> Operator:
    """j0..j3 run and report (learnt); j0 and j1 complete; the extender's placement is in each status."""
    op = h.operator()
    op.run_round()
    h.settle_pods()
    for k, rate in enumerate((40.0, 55.0, 70.0, 90.0)):
        _report(h, f"j{k}", rate, 100.0)
    h.clock.advance(5)
    op.run_round()
    for k in (0, 1):
        _report(h, f"j{k}", 45.0, 1000.0)
    h.clock.advance(5)
    op.run_round()
    h.clock.advance(5)
    op.run_round()
    for k in range(4):
        h.api.patch_trainingjob_status("ml", f"j{k}", {"placement": {f"j{k}-g1-0": "n1"}})
    return op


def _restarted(h: Harness) -> tuple[Operator, CorrectedOracle]:
    oracle = CorrectedOracle.load()
    h.oracle = oracle  # type: ignore[assignment]
    return h.operator(), oracle


def test_a_new_process_restores_the_state_and_replays_only_the_finished_jobs_it_does_not_hold() -> None:
    h = _harness()
    first = h.oracle
    assert isinstance(first, CorrectedOracle)
    _taught(h).run_round()
    assert next(c for c in h.api.calls if c[0].endswith("_configmap")) == ("create_configmap", NS, CM)
    want, seen = first.throughput(QUESTION), first.corrector.observations()
    assert h.api.status_of("ml", "j0")["phase"] == "Succeeded"
    restored = metrics.LEARNING_STATE_RESTORES.labels(outcome="restored")
    count = restored._value.get()
    op, oracle = _restarted(h)
    h.clock.advance(12.5)
    op.run_round()
    assert restored._value.get() == count + 1
    assert metrics.LEARNING_STATE_RESTORED_AGE._value.get() == 12.5  # written at the last round
    # j0 and j1 (finished, in the state) are not replayed; j2 and j3's last reports not learnt again
    assert oracle.corrector.observations() == seen
    assert oracle.throughput(QUESTION) == want
    assert set(op._observed_report_time) == {"ml/j2", "ml/j3"}
    # a job that finished while no operator ran (not in the state) is replayed, once
    late = trainingjob("late", replicas={"min": 1, "max": 1, "gpusPerReplica": 2})
    late["status"] = {
        "phase": "Succeeded",
        "observedThroughput": 30.0,
        "gangGeneration": 1,
        "completionTime": "2027-01-15T08:00:00Z",
        "placement": {"late-g1-0": "n1"},
    }
    h.api.add_trainingjob(late)
    h.clock.advance(5)
    op.run_round()
    op.run_round()
    assert oracle.corrector.observations() == seen + 1


def test_a_new_process_without_a_state_replays_everything_still_listed() -> None:
    h = _harness()
    _taught(h).run_round()
    h.api.configmaps.clear()
    op, oracle = _restarted(h)
    op.run_round()
    # j0 and j1 from their status, j2 and j3 from the latest report, as first learnt by this process
    assert oracle.corrector.observations() == 4


def _state_cm(h: Harness, blob: bytes | str) -> None:
    raw = blob if isinstance(blob, str) else base64.b64encode(blob).decode()
    h.api.configmaps[(NS, CM)] = {"metadata": {"name": CM, "namespace": NS, "resourceVersion": "1"}}
    h.api.configmaps[(NS, CM)]["binaryData"] = {KEY: raw}


def _doc(**change: object) -> bytes:
    oracle = CorrectedOracle.load()
    doc = json.loads(zlib.decompress(encode(oracle.state(), {}, {})))
    doc.update(change)
    return zlib.compress(json.dumps(doc).encode())


def _settings_changed() -> bytes:
    oracle = CorrectedOracle.load()
    state = oracle.state()
    state["corrector"]["settings"][2] = "split"  # type: ignore[index]
    return _doc(oracle=state)


@pytest.mark.parametrize(
    ("stored", "why", "outcome"),
    [
        (None, "missing", "missing"),
        ("not base64!", "corrupt \\(base64", "corrupt"),
        (b"not zlib", "corrupt \\(error", "corrupt"),
        (zlib.compress(b"[1, 2]"), "corrupt \\(not a JSON object", "corrupt"),
        (_doc(schema=SCHEMA + 1), f"schema {SCHEMA + 1} is newer", "schema"),
        (_doc(schema=0), "schema 0 is older", "schema"),
        (_doc(live={"ml/j2": "uid"}), "corrupt \\(live job", "corrupt"),
        (
            _doc(oracle={"model": "f" * 64, "corrector": {}, "before": []}),
            "not usable \\(written over offline",
            "model",
        ),
        (_settings_changed(), "not usable \\(written with corrector settings", "settings"),
    ],
)
def test_a_state_it_cannot_use_is_logged_with_the_reason_and_the_replay_runs(
    stored: bytes | str | None, why: str, outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    h = _harness()
    _taught(h).run_round()
    if stored is None:
        h.api.configmaps.clear()
    else:
        _state_cm(h, stored)
    op, oracle = _restarted(h)
    caplog.clear()
    counted = metrics.LEARNING_STATE_RESTORES.labels(outcome=outcome)
    before = counted._value.get()
    with caplog.at_level(logging.INFO):
        op.run_round()
        op.run_round()
    lines = [r.getMessage() for r in caplog.records if "learning state not restored" in r.getMessage()]
    assert len(lines) == 1, lines
    assert re.search(why, lines[0]), lines[0]
    assert counted._value.get() == before + 1
    assert oracle.corrector.observations() == 4  # the replay of j0 and j1, j2 and j3's latest reports


def test_only_the_leader_writes_and_a_new_leader_restores() -> None:
    h = _harness()
    h.leader[0] = False
    op = h.operator()
    for _ in range(3):
        op.run_round()
        h.clock.advance(5)
    assert (NS, CM) not in h.api.configmaps
    h.leader[0] = True
    _taught(h)
    assert (NS, CM) in h.api.configmaps
    # a standby whose elector says it leads only between its rounds never writes: may_act just before
    writes = [c for c in h.api.calls if c[0].endswith("_configmap")]
    op2, _ = _restarted(h)
    seq = iter([True, False])
    op2.may_act = lambda: next(seq, False)
    h.clock.advance(100)
    op2.run_round()
    assert [c for c in h.api.calls if c[0].endswith("_configmap")] == writes


def test_it_writes_at_most_once_per_interval_and_only_what_changed() -> None:
    h = _harness(interval=60.0)
    op = _taught(h)  # rounds at 0, 5, 10, 15 s: the first writes

    def writes() -> int:
        return len([c for c in h.api.calls if c[0].endswith("_configmap")])

    assert writes() == 1
    outcomes = {o: metrics.LEARNING_STATE_WRITES.labels(outcome=o) for o in ("written", "unchanged")}
    counts = {o: c._value.get() for o, c in outcomes.items()}
    h.clock.advance(60)
    op.run_round()  # j0, j1 forgotten since (their records retired): changed
    assert writes() == 2
    assert metrics.LEARNING_STATE_LAST_WRITE._value.get() == h.clock.now()
    blob = base64.b64decode(h.api.configmaps[(NS, CM)]["binaryData"][KEY])
    assert metrics.LEARNING_STATE_BYTES._value.get() == len(blob)
    # j2 and j3's records live, j0 and j1's ended, both finished jobs listed, nothing trimmed
    for kind, n in {"live": 2, "ended": 2, "finished": 2}.items():
        assert metrics.LEARNING_STATE_RECORDS.labels(kind=kind)._value.get() == n
        assert metrics.LEARNING_STATE_TRIMMED.labels(kind=kind)._value.get() == 0
    h.clock.advance(60)
    op.run_round()  # nothing new
    assert writes() == 2
    assert {o: c._value.get() - counts[o] for o, c in outcomes.items()} == {"written": 1, "unchanged": 1}


def test_a_bound_below_the_smallest_state_writes_nothing_and_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # 100 bytes: less than the state with every record trimmed (the model id alone is 64 characters)
    monkeypatch.setattr(learning_state, "MAX_BYTES", 100)
    h = _harness()
    with caplog.at_level(logging.WARNING):
        _taught(h).run_round()
    assert (NS, CM) not in h.api.configmaps
    assert [r.getMessage() for r in caplog.records].count(
        "learning state too large to store even trimmed; not written"
    ) == 1


def test_the_encoding_lists_the_latest_finished_jobs_and_a_cutoff_below_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 5 finished jobs completed at minutes 1..5, room for 3: uids of minutes 3, 4, 5 and everything that
    # completed before minute 3 counts as learnt
    monkeypatch.setattr(learning_state, "ENDED_MAX", 3)
    ended = {f"ml/e{m}": (f"u{m}", f"2027-01-15T08:0{m}:00Z") for m in (4, 1, 5, 3, 2)}
    got = decode(encode({"x": 1}, {"ml/a": ("ua", 12.5)}, ended))
    assert not isinstance(got, str)
    assert got.ended == {"u3", "u4", "u5"} and got.ended_before == "2027-01-15T08:03:00Z"
    assert got.live == {"ml/a": ("ua", 12.5)} and got.oracle == {"x": 1}


def test_an_api_failure_on_write_is_retried_at_the_next_write() -> None:
    from scheduler.k8s.errors import ApiUnavailable

    h = _harness()
    store = StateStore(h.api, NS, CM)
    h.api.fail_next("get_configmap", ApiUnavailable("down"))
    assert store.write(b"x") == "error"
    assert store.write(b"x") == "written"
    assert store.write(b"x") == "unchanged"
