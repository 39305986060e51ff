"""The seams of the scheduling core, as ``typing.Protocol``s: policies (and their optional ``MovesRunning``
capability), throughput oracles, the measured throughput table behind the simulator's truth, and clocks.

Pure: protocols only. Real implementations (the ``perfmodel`` predictor behind ``scheduler.oracles``,
the wall clock) and fakes for tests live elsewhere and are passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from scheduler.core.decisions import Decision
from scheduler.core.types import ClusterSnapshot, Job, MemoryFit, PlacementShape


@runtime_checkable
class ThroughputOracle(Protocol):
    """Answers "how fast does job J run on placement P", in batches.

    ``throughput`` returns, for each ``(job, shape)`` pair in order, the job's throughput in its own work
    units per second (all replicas together). A non-positive value means the job cannot run there
    (e.g. the model does not fit in that GPU's memory).
    """

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]: ...


@runtime_checkable
class MemoryOracle(Protocol):
    """Optional companion of ``ThroughputOracle``: does a job fit in the GPU memory of a placement?

    ``memory_fit`` returns, for each ``(job, shape)`` pair in order, a ``MemoryFit``, or None where it
    cannot tell (then nothing is assumed). An oracle that implements it lets ``allowed_types`` drop GPU
    types a job does not fit and ``run_round`` refuse to start a job where it would not fit.
    """

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]: ...


@runtime_checkable
class IntervalOracle(Protocol):
    """Optional companion of ``ThroughputOracle``: how far each answer may be off.

    ``throughput_interval`` returns, for each ``(job, shape)`` pair in order, ``(low, high)`` bounds of
    the throughput ``throughput`` answers (the same work units; e.g. the predictor's ~80% interval);
    ``(0, 0)`` where it cannot tell. The aware policies widen these with what the running jobs'
    measurements say about the oracle (``scheduler.policies.type_planner.Uncertainty``) and keep to the
    newest-first preference where a type's predicted advantage is inside them.
    """

    def throughput_interval(
        self, queries: Sequence[tuple[Job, PlacementShape]]
    ) -> list[tuple[float, float]]: ...


@runtime_checkable
class HeldOutOracle(Protocol):
    """Optional companion of a ``ThroughputOracle`` that learns from measured throughput
    (``scheduler.oracles.learning.CorrectedOracle``): for each ``(job, shape)`` in order, what it answered
    there before it first learned that job's throughput there (its current answer where it has not). The
    aware policies read the oracle's error from the running jobs' measurements
    (``scheduler.policies.type_planner.Uncertainty``): against answers that already hold each job's own
    measurement that error reads near 0, though questions no job has measured are as far off as before.
    """

    def throughput_held_out(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]: ...


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy: data in, decisions out. No clock, no I/O, no state kept between rounds.

    ``allocate`` returns a decision for every job it was given (running or waiting). What ran before
    is in ``snapshot.allocations``; randomness comes from the policy's config seed.
    """

    name: str

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]: ...


@runtime_checkable
class MovesRunning(Protocol):
    """Optional capability of a ``Policy``: it may move a running job when nothing arrived and nobody waits.

    A policy with ``moves_running`` true may change a running job's allocation in a round where only
    another job's completion happened and no job waits (e.g. ``las`` with ``consolidate`` moving a spread
    gang onto GPUs just freed). A policy without the attribute, or with it false, never does, on a cluster
    of one GPU type with rigid jobs, so a caller (the simulator) may skip such rounds.
    """

    moves_running: bool


class MeasuredThroughput(Protocol):
    """Measured throughput by configuration: what ``perfmodel.truth.GroundTruth`` offers the simulator.

    ``throughput`` gives the iterations/s of a whole job (global batch ``batch_size``) on ``num_gpus`` GPUs
    of ``gpu_type`` over ``num_nodes`` nodes linked at ``network_gbps`` (None: at the links it was measured
    on; only a placement across nodes depends on it), or None where nothing was measured.
    ``TableOracle`` answers from it (``scheduler.sim.gavel.GavelTable`` is another implementation); the
    trace workload builder also needs the list of what was measured (``scheduler.sim.trace_jobs.Catalogue``).
    """

    def throughput(
        self,
        model: str,
        batch_size: int,
        gpu_type: str,
        num_gpus: int,
        num_nodes: int = 1,
        dataset: str = "",
        network_gbps: float | None = None,
    ) -> float | None: ...


class Clock(Protocol):
    """Source of ``now`` for the shells (the operator's wall clock, the simulator's virtual clock)."""

    def now(self) -> float: ...
