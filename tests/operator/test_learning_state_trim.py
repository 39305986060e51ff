"""A learning state over the ConfigMap bound is trimmed to fit, least valuable parts first, written, and
restored by the next leader; the metrics an SRE watches say what was written, trimmed and restored.

Order (``learning_state.encode_capped``): held-out answers (oldest first), finished jobs' uids (oldest
completed first, the cutoff rising), ended records beyond the latest ``TRIM_KEEP_PER_MODEL`` of each
(model, GPU type) (oldest first), the other ended records, then live jobs (fewest observations first).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections import Counter

import pytest

from scheduler import metrics
from scheduler.core.types import PlacementShape
from scheduler.operator import learning_state
from scheduler.operator.learning_state import KEY, KINDS, Encoded, decode, encode, encode_capped
from scheduler.operator.reconcile import Operator
from scheduler.oracles.learning import CorrectedOracle, state_parts
from tests.operator.test_learning_state_store import CM, NS, QUESTION, _harness, _restarted, _taught
from tests.oracles.test_learning_state import MODELS, SHAPES, _job, _questions
from tests.oracles.test_learning_state import _taught as _oracle_taught

A100 = [PlacementShape("A100", 1), PlacementShape("A100", 4)]


def _writer() -> tuple[CorrectedOracle, dict[str, tuple[str, float | None]], dict[str, tuple[str, str]]]:
    """An oracle with 200 ended jobs (146 records kept in the shared levels: 32 per model and type) over
    V100 and K80, 100 live jobs there (j200..j299, one report each; j250..j259 a second one), and 6 live
    jobs on A100 (a type no ended job ran on); the operator's live and finished maps to match."""
    oracle = _oracle_taught(300)
    for i in range(250, 260):  # a second report, where the job runs
        job, shape = _job(f"ns/j{i}", *MODELS[i % 3]), SHAPES[i % 4]
        oracle.observe(job, shape, oracle.throughput([(job, shape)])[0] * 1.1)
    for k in range(6):
        job = _job(f"ns/a{k}", "resnet50", 64)
        oracle.observe(job, A100[k % 2], oracle.throughput([(job, A100[k % 2])])[0] * 0.8)
    live: dict[str, tuple[str, float | None]] = {f"ns/j{i}": (f"uid-{i}", 1.0) for i in range(200, 300)}
    live |= {f"ns/a{k}": (f"uid-a{k}", 1.0) for k in range(6)}
    ended = {f"ns/j{i}": (f"uid-{i}", f"2027-01-01T00:{i // 60:02d}:{i % 60:02d}Z") for i in range(200)}
    return oracle, live, ended


def _maps(op: Operator) -> tuple[dict[str, tuple[str, float | None]], dict[str, tuple[str, str]]]:
    """The live and finished jobs the operator would store (as ``Operator._save_state``)."""
    return {k: (uid, op._observed_report_time.get(k)) for k, uid in op._live.items()}, op._completed


def _capped(monkeypatch: pytest.MonkeyPatch, cap: int, *args: object) -> Encoded:
    monkeypatch.setattr(learning_state, "MAX_BYTES", cap)
    return encode_capped(*args)  # type: ignore[arg-type]


def test_a_state_within_the_bound_is_written_whole() -> None:
    oracle, live, ended = _writer()
    got = encode_capped(oracle.state(), live, ended)
    assert got.blob == encode(oracle.state(), live, ended)
    assert not got.was_trimmed
    assert got.records == {"live": 106, "ended": 146, "held_out": 14, "finished": 200}


def test_trimming_goes_part_by_part_in_the_documented_order(monkeypatch: pytest.MonkeyPatch) -> None:
    oracle, live, ended = _writer()
    state = oracle.state()
    full = len(encode(state, live, ended))
    parts = state_parts(state)
    written = json.loads(json.dumps(state))  # as plain JSON values
    groups = Counter(parts.ended)
    protected = sum(min(n, learning_state.TRIM_KEEP_PER_MODEL) for n in groups.values())
    every = {"held_out": 14, "finished": 199, "ended": 146, "live": 106}  # the latest finished uid stays
    seen: set[str] = set()
    for frac in (0.97, 0.9, 0.7, 0.5, 0.35, 0.2, 0.1, 0.06):
        got = _capped(monkeypatch, int(full * frac), state, live, ended)
        assert got.blob and len(got.blob) <= int(full * frac), frac
        assert got.records == {k: got.records[k] for k in KINDS}
        # a part is trimmed only once every part before it is gone
        order = ["held_out", "finished", "ended", "live"]
        for k, kind in enumerate(order):
            if got.trimmed[kind]:
                seen.add(kind)
                assert all(got.trimmed[e] == every[e] for e in order[:k]), (frac, got.trimmed)
        if frac in (0.2, 0.1):  # live jobs go only as far as needed, never all of them here
            assert 0 < got.trimmed["live"] < every["live"], (frac, got.trimmed)
        doc = json.loads(zlib.decompress(got.blob))
        assert doc["oracle"]["before"] == written["before"][got.trimmed["held_out"] :]  # oldest first
        kept = doc["oracle"]["corrector"]["retired"]
        if 0 < got.trimmed["ended"] <= len(parts.ended) - protected:
            # the oldest go first, and each (model, GPU type) keeps at least its latest 4
            for group, n in groups.items():
                mine = [r for r in written["corrector"]["retired"] if (r[0], r[1]) == group]
                left = [r for r in kept if (r[0], r[1]) == group]
                assert left == mine[len(mine) - len(left) :]
                assert len(left) >= min(n, learning_state.TRIM_KEEP_PER_MODEL)
        if 0 < got.trimmed["live"] < every["live"]:
            # fewest observations first: the ten jobs observed twice are the last to go
            names = {x[0][0] for x in doc["oracle"]["corrector"]["jobs"]}
            assert set(doc["live"]) == names | ({k for k in live if k not in names} & set(doc["live"]))
            twice = {f"ns/j{i}" for i in range(250, 260)}
            assert twice <= names or not (names - twice)
        if got.trimmed["finished"]:
            # the cutoff rises to the oldest uid kept: none of those left out completed at or after it
            left_out = [t for uid, t in ended.values() if uid not in doc["ended"]]
            assert doc["endedBefore"] and max(left_out) < doc["endedBefore"]
    assert seen == {"held_out", "finished", "ended", "live"}


def test_a_trimmed_state_restores_refitting_the_types_that_lost_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    oracle, live, ended = _writer()
    state = oracle.state()
    full = len(encode(state, live, ended))
    got = _capped(monkeypatch, int(full * 0.5), state, live, ended)
    assert 0 < got.trimmed["ended"] < 146 and got.trimmed["live"] == 0
    restored = decode(got.blob)
    assert not isinstance(restored, str)
    fresh = CorrectedOracle.load()
    fresh.restore(json.loads(json.dumps(restored.oracle)))
    q = _questions() + [(_job(f"ns/a{k}", "resnet50", 64), s) for k in range(6) for s in A100]
    answers = fresh.throughput(q)
    want = oracle.throughput(q)
    # A100 lost no record: its fitted levels are kept as written, and it answers bit for bit as the
    # writer; V100 and K80 lost records and answer from what they kept
    a100 = [k for k, (_, s) in enumerate(q) if s.gpu_type == "A100"]
    assert [answers[k] for k in a100] == [want[k] for k in a100]
    assert [a for k, a in enumerate(answers) if k not in a100] != [
        w for k, w in enumerate(want) if k not in a100
    ]
    # consistent: refitting every type from the records it holds changes no answer
    corrector = fresh.corrector
    corrector._dirty_types |= {"V100", "K80", "A100"}
    corrector._dirty = True
    fresh._rows.clear()
    assert fresh.throughput(q) == answers
    assert fresh.corrector.jobs() == 106


def test_a_state_over_the_bound_is_trimmed_written_and_the_next_leader_replays_nothing_it_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = _harness()
    first = h.oracle
    assert isinstance(first, CorrectedOracle)
    op = _taught(h)
    op.run_round()  # j0 and j1 finished (2 reports each, their records retired); j2 and j3 run (1 each)
    live, done = _maps(op)
    # the largest bound that trims both ended records and no live one

    def fits(c: int) -> bool:
        got = _capped(monkeypatch, c, first.state(), live, done).trimmed
        return got["ended"] == 2 and got["live"] == 0

    cap = next(c for c in range(8192, 0, -8) if fits(c))
    monkeypatch.setattr(learning_state, "MAX_BYTES", cap)
    h.api.configmaps.clear()
    writes = metrics.LEARNING_STATE_WRITES.labels(outcome="trimmed")
    before = writes._value.get()
    h.clock.advance(5)
    op.run_round()
    assert writes._value.get() == before + 1
    blob = base64.b64decode(h.api.configmaps[(NS, CM)]["binaryData"][KEY])
    assert len(blob) <= cap
    assert metrics.LEARNING_STATE_BYTES._value.get() == len(blob)
    assert metrics.LEARNING_STATE_TRIMMED.labels(kind="ended")._value.get() == 2
    assert metrics.LEARNING_STATE_RECORDS.labels(kind="ended")._value.get() == 0
    assert metrics.LEARNING_STATE_LAST_WRITE._value.get() == h.clock.now()
    op2, oracle = _restarted(h)
    h.clock.advance(30)
    op2.run_round()
    op2.run_round()
    # j0 and j1's records were trimmed: they are not replayed (their uids are in the state); j2 and j3's
    # records restored, their reports not learnt again
    assert oracle.corrector.observations() == 2
    assert metrics.LEARNING_STATE_RESTORED_AGE._value.get() == 30
    assert oracle.throughput(QUESTION) != first.throughput(QUESTION)  # what j0 and j1 taught is gone


def test_live_jobs_trimmed_are_learnt_again_from_their_latest_report(monkeypatch: pytest.MonkeyPatch) -> None:
    h = _harness()
    first = h.oracle
    assert isinstance(first, CorrectedOracle)
    op = _taught(h)
    op.run_round()
    live, done = _maps(op)
    cap = next(
        c
        for c in range(8192, 0, -8)
        if _capped(monkeypatch, c, first.state(), live, done).trimmed["live"] == 1
    )
    monkeypatch.setattr(learning_state, "MAX_BYTES", cap)
    h.api.configmaps.clear()
    h.clock.advance(5)
    op.run_round()
    doc = json.loads(zlib.decompress(base64.b64decode(h.api.configmaps[(NS, CM)]["binaryData"][KEY])))
    # one report each: the most recently first observed (j3) goes first, record and uid
    assert [x[0][0] for x in doc["oracle"]["corrector"]["jobs"]] == ["ml/j2"]
    assert set(doc["live"]) == {"ml/j2"}
    op2, oracle = _restarted(h)
    op2.run_round()
    op2.run_round()
    # j2's record restored; j3 unknown to the state: its latest report learnt again; j0, j1 not replayed
    assert oracle.corrector.observations() == 2
    assert set(op2._observed_report_time) == {"ml/j2", "ml/j3"}
