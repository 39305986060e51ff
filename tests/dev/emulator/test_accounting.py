"""Progress accounting: advance at a rate, checkpoint on an interval, restart from the checkpoint."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsched_dev.emulator import accounting


@pytest.mark.parametrize(
    ("rate", "steps", "interval", "progress", "checkpoint"),
    [
        # 10 units/s for 3 steps of 10 s, checkpoint every 25 s: progress 300; the checkpoint is taken
        # at 25 s of run time, i.e. 250 units (during the third step, 5 s before its end)
        (10.0, [10, 10, 10], 25.0, 300.0, 250.0),
        # no checkpoint interval reached yet: nothing saved
        (10.0, [10], 25.0, 100.0, 0.0),
        # one long step spanning two intervals (60 s, every 25 s): the last boundary is at 50 s = 500
        (10.0, [60], 25.0, 600.0, 500.0),
        # interval 0 means never checkpoint until the end
        (1.0, [5, 5], 0.0, 10.0, 0.0),
    ],
)
def test_advance_table(
    rate: float, steps: list[float], interval: float, progress: float, checkpoint: float
) -> None:
    state = accounting.start("1", 10_000.0, 0.0)
    for dt in steps:
        state = accounting.advance(state, rate, dt, interval)
    assert state.progress == pytest.approx(progress)
    assert state.checkpoint == pytest.approx(checkpoint)
    assert state.throughput == rate


def test_completion_stops_at_the_total_and_checkpoints() -> None:
    # 100 units of work at 30/s: 90 after 3 s, done (100, not 120) after 4 s
    state = accounting.start("1", 100.0, 0.0)
    state = accounting.advance(state, 30.0, 3.0, 1000.0)
    assert (state.progress, state.checkpoint, state.done) == (90.0, 0.0, False)
    state = accounting.advance(state, 30.0, 1.0, 1000.0)
    assert (state.progress, state.checkpoint, state.done) == (100.0, 100.0, True)
    assert accounting.advance(state, 30.0, 5.0, 1000.0) == state


def test_restart_loses_the_work_since_the_checkpoint() -> None:
    # 10/s, checkpoint every 20 s, run 35 s: progress 350, checkpoint 200 -> a restart resumes at 200
    state = accounting.advance(accounting.start("1", 1000.0, 0.0), 10.0, 35.0, 20.0)
    assert (state.progress, state.checkpoint) == (350.0, 200.0)
    restarted = accounting.start("2", 1000.0, accounting.restart_point(state, None))
    assert (restarted.progress, restarted.checkpoint, restarted.generation) == (200.0, 200.0, "2")
    # the newest checkpoint wins, as the example trainer resumes from the newest one in its volume:
    # the operator's start-progress when it saw a later one, else the emulator's own
    assert accounting.restart_point(state, 250.0) == 250.0
    assert accounting.restart_point(state, 150.0) == 200.0
    assert accounting.restart_point(None, 150.0) == 150.0
    assert accounting.restart_point(None, None) == 0.0


def test_sigterm_saves_a_checkpoint_where_the_gang_stands() -> None:
    # 10/s, checkpoint every 20 s, run 35 s: progress 350, checkpoint 200; SIGTERM saves 350
    state = accounting.advance(accounting.start("1", 1000.0, 0.0), 10.0, 35.0, 20.0)
    stopped = accounting.terminate(state)
    assert (stopped.progress, stopped.checkpoint, stopped.throughput) == (350.0, 350.0, 0.0)
    assert accounting.restart_point(stopped, 200.0) == 350.0  # nothing lost


def test_resume_keeps_progress_and_clamps_the_checkpoint() -> None:
    state = accounting.resume("3", 100.0, progress=60.0, checkpoint=80.0)
    assert (state.progress, state.checkpoint) == (60.0, 60.0)
    assert accounting.resume("3", 100.0, progress=500.0, checkpoint=0.0).progress == 100.0


@settings(max_examples=60, deadline=None)
@given(
    total=st.floats(1.0, 1e6),
    start=st.floats(0.0, 2e6),
    rate=st.floats(0.0, 1e4),
    interval=st.floats(0.0, 500.0),
    steps=st.lists(st.floats(0.0, 300.0), max_size=15),
)
def test_invariants(total: float, start: float, rate: float, interval: float, steps: list[float]) -> None:
    state = accounting.start("g", total, start)
    for dt in steps:
        nxt = accounting.advance(state, rate, dt, interval)
        assert 0.0 <= nxt.checkpoint <= nxt.progress <= total
        assert nxt.progress >= state.progress  # progress never goes back while the gang runs
        assert nxt.checkpoint >= state.checkpoint
        assert nxt.progress - state.progress <= rate * dt * (1 + 1e-9) + 1e-9
        state = nxt
    assert state.done == (state.progress >= total)
