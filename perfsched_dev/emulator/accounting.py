"""Progress accounting of one emulated training gang: advance, checkpoint, restart from a checkpoint.

Pure: a frozen ``GangProgress`` value and functions that return the next value from the time that passed
and the gang's true throughput; no clock, no I/O. ``perfsched_dev.emulator.table_driven`` feeds it
from the API.
Time here is the *emulated* time: wall-clock seconds times the emulator's time scale.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class GangProgress:
    """Where one generation of a job's gang stands.

    ``progress``/``checkpoint`` are work units (the TrainingJob's unit); ``since_checkpoint_s`` is
    emulated seconds run since the last checkpoint; ``throughput`` is the work units per emulated
    second the gang made in the last step (0 before the first step).
    """

    generation: str
    total_work: float
    progress: float = 0.0
    checkpoint: float = 0.0
    since_checkpoint_s: float = 0.0
    throughput: float = 0.0

    @property
    def done(self) -> bool:
        return self.progress >= self.total_work


def start(generation: str, total_work: float, from_progress: float) -> GangProgress:
    """A gang (re)starting from ``from_progress`` work units: a checkpoint, so nothing is lost yet."""
    at = min(max(0.0, from_progress), total_work)
    return GangProgress(generation=generation, total_work=total_work, progress=at, checkpoint=at)


def resume(generation: str, total_work: float, progress: float, checkpoint: float) -> GangProgress:
    """A gang whose workers kept running while the emulator was away: both values survive."""
    p = min(max(0.0, progress), total_work)
    return GangProgress(generation, total_work, progress=p, checkpoint=min(max(0.0, checkpoint), p))


def advance(
    state: GangProgress, throughput: float, dt_s: float, checkpoint_interval_s: float
) -> GangProgress:
    """Run the gang for ``dt_s`` emulated seconds at ``throughput`` work units per second.

    Progress stops at the total. A checkpoint is taken each time ``checkpoint_interval_s`` of run time
    has passed since the last one (a gang that stops between checkpoints loses the difference), and
    always at completion, as a finishing worker saves its final state.
    """
    if state.done or dt_s <= 0:
        return state
    rate = max(0.0, throughput)
    progress = min(state.total_work, state.progress + rate * dt_s)
    since = state.since_checkpoint_s + dt_s
    checkpoint = state.checkpoint
    if progress >= state.total_work:
        checkpoint, since = progress, 0.0
    elif checkpoint_interval_s > 0 and since >= checkpoint_interval_s:
        # the checkpoint is taken at the last interval boundary inside this step
        overshoot = since % checkpoint_interval_s
        checkpoint = max(checkpoint, progress - rate * overshoot)
        since = overshoot
    return replace(state, progress=progress, checkpoint=checkpoint, since_checkpoint_s=since, throughput=rate)


def terminate(state: GangProgress) -> GangProgress:
    """A gang that got SIGTERM saves a checkpoint where it stands, as the worker contract asks (the
    example trainer stops at the next step and saves it within the grace period)."""
    return replace(state, checkpoint=state.progress, since_checkpoint_s=0.0, throughput=0.0)


def restart_point(previous: GangProgress | None, start_progress: float | None) -> float:
    """Where a new generation starts: the newest checkpoint its workers find, the operator's
    ``start-progress`` or the last checkpoint this emulator saved, whichever is further (the example
    trainer resumes from the newest checkpoint in its volume, which a SIGTERM checkpoint the operator
    did not see yet may have moved past the start progress)."""
    saved = previous.checkpoint if previous is not None else None
    if start_progress is None:
        return saved or 0.0
    return max(start_progress, saved) if saved is not None else start_progress
