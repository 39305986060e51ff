"""Gavel-style heterogeneity-aware allocation over a (jobs x GPU types) throughput matrix.

Pure. Each round: (1) the oracle fills the throughput matrix X[j, t] (job j on its asked GPUs of type t,
one batched call); rows are normalised by the job's best type, so X'[j, t] is the fraction of its best
speed. (2) An LP solved with SciPy's HiGHS (``scipy.optimize.linprog(method="highs")``) finds the
fraction of time A[j, t] each job should spend on each type: ``max_min_fairness`` maximises the
smallest normalised throughput sum_t X'[j, t] A[j, t] (a small weight on the total breaks ties towards
efficiency); ``max_total_throughput`` maximises the sum. Constraints: sum_t A[j, t] <= 1 per job and
sum_j gpus_j A[j, t] <= GPUs of type t. (3) The fractional plan is rounded to whole gangs for this
round: jobs with the largest deficit (planned time share minus the share of time they have received so
far, from attained service) go first, each on the types its plan favours most; preemptive with a
margin on the deficit.

**A fairness policy, not a JCT policy.** Use it when every job should get the same share of its best
speed (its FTF rho is low); for average JCT use an ordering policy with ``heterogeneity: aware``
(``las``, ``srsf``: ``scheduler.policies.type_planner``), which beat it on every benchmark cell of
``bench/decision_quality.py``. Why it loses to LAS on average JCT (docs/decisions/0010-las-default-policy.md):

- the objective is max-min fairness over *every* active job, queue included: each gets the same
  fraction of its best speed, i.e. processor sharing, which on heavy-tailed Philly durations is far
  from LAS/SRPT (short jobs wait their turn behind long ones instead of finishing first);
- the plan is realised by time-slicing: every round the jobs with the largest deficit (planned share
  minus the share received since submission) run, so a job that ran for a round falls behind and is
  preempted. Churn is not priced: 2.3 preemptions per job at load 1 and 5.7 at load 3 (400 jobs), each
  costing a restart, and the more jobs wait the smaller each share and the faster the rotation;
- under the predictor the LP is steered by the jobs the predictor gets most wrong: the 8-GPU jobs
  spread over two 4-GPU servers (2% of the jobs, 90% of the GPU-hours of the Philly sample) are its
  least accurate questions (docs/perfmodel-accuracy.md), and normalised rows make them look like the
  jobs that need V100s most, so an error there hands the V100s to the biggest jobs, which barely gain.

Follows Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads" (Gavel), OSDI 2020. Differs: normalisation is by the job's own best type rather than an
equal-share allocation; no space sharing; the received share is estimated from attained service
instead of Gavel's per-round bookkeeping, so the policy keeps no state between rounds; leftover GPUs
are filled work-conservingly by jobs whose plan gave them no share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies.base import replica_options, type_infos

if TYPE_CHECKING:  # numpy is imported where the policy solves (the simulator's other policies need none)
    import numpy as np
    from numpy.typing import NDArray
from scheduler.policies.config import parse_config, require
from scheduler.policies.elastic_shares import PredictedThroughputs, size_bounds
from scheduler.policies.greedy import Request, greedy_allocate

Objective = Literal["max_min_fairness", "max_total_throughput"]


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """``objective``: the LP's goal; ``preempt_margin``: deficit difference (time share) needed to evict."""

    objective: Objective = "max_min_fairness"
    preemptive: bool = True
    preempt_margin: float = 0.1

    def __post_init__(self) -> None:
        require(0 <= self.preempt_margin <= 1, "preempt_margin", "must be between 0 and 1")


def solve_fractional(
    throughput: NDArray[np.float64],
    gpus: NDArray[np.float64],
    capacity: NDArray[np.float64],
    objective: Objective = "max_min_fairness",
) -> NDArray[np.float64]:
    """Time fractions A (jobs x types) from the normalised throughput matrix, by HiGHS.

    ``throughput[j, t]`` is normalised (0 where j cannot run on t), ``gpus[j]`` the GPUs job j asks
    (or ``gpus[j, t]``: what it would take on type t), ``capacity[t]`` the GPUs of type t.
    Raises ``RuntimeError`` if the solver fails.

    Jobs with identical rows and sizes are solved as one class with a multiplicity: both objectives
    are symmetric in such jobs and the LP is convex, so giving each member the class's share is
    optimal, and the LP shrinks from jobs to distinct (row, size) classes.
    """
    import numpy as np

    n, m = throughput.shape
    if n == 0 or m == 0:
        return np.zeros((n, m))
    per_type = gpus.astype(float) if gpus.ndim == 2 else np.repeat(gpus.astype(float)[:, None], m, axis=1)
    keyed = np.column_stack([np.round(throughput, 9), per_type])
    classes, inverse, counts = np.unique(keyed, axis=0, return_inverse=True, return_counts=True)
    share = _solve_classes(classes[:, :m], classes[:, m:], counts.astype(float), capacity, objective)
    out: NDArray[np.float64] = share[inverse.reshape(-1)]
    return out


def _solve_classes(
    throughput: NDArray[np.float64],
    gpus: NDArray[np.float64],
    counts: NDArray[np.float64],
    capacity: NDArray[np.float64],
    objective: Objective,
) -> NDArray[np.float64]:
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n, m = throughput.shape
    jj, tt = np.nonzero(throughput > 0)
    k = len(jj)
    if k == 0:
        return np.zeros((n, m))
    x = throughput[jj, tt]
    var = np.arange(k)
    rows: list[NDArray[np.int64]] = []
    cols: list[NDArray[np.int64]] = []
    vals: list[NDArray[np.float64]] = []
    # sum_t A[j, t] <= 1 (rows 0..n-1)
    rows.append(jj)
    cols.append(var)
    vals.append(np.ones(k))
    # sum_j count_j gpus_j A[j, t] <= capacity_t (rows n..n+m-1)
    rows.append(n + tt)
    cols.append(var)
    vals.append(counts[jj] * gpus[jj, tt])
    b = [np.ones(n), capacity.astype(float)]
    total = float(counts.sum())
    if objective == "max_min_fairness":
        # z - sum_t X'[j, t] A[j, t] <= 0 for classes that can run anywhere (rows n+m..)
        runnable = np.unique(jj)
        row_of = np.full(n, -1)
        row_of[runnable] = np.arange(len(runnable))
        rows.append(n + m + row_of[jj])
        cols.append(var)
        vals.append(-x)
        rows.append(n + m + np.arange(len(runnable)))
        cols.append(np.full(len(runnable), k))
        vals.append(np.ones(len(runnable)))
        b.append(np.zeros(len(runnable)))
        # a small weight on the total breaks the many max-min ties towards efficiency
        c = np.concatenate([-1e-3 * counts[jj] * x / total, [-1.0]])
        nvars = k + 1
        bounds = [(0.0, 1.0)] * k + [(0.0, None)]
    else:
        c = -counts[jj] * x
        nvars = k
        bounds = [(0.0, 1.0)] * k
    a_ub = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(int(sum(len(v) for v in b)), nvars),
    ).tocsr()
    res = linprog(c, A_ub=a_ub, b_ub=np.concatenate(b), bounds=bounds, method="highs")
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"hetero LP failed: {res.message}")
    out = np.zeros((n, m))
    out[jj, tt] = np.clip(res.x[:k], 0.0, 1.0)
    return out


class HeteroPolicy:
    """Gavel-style LP over the throughput matrix, rounded to gangs by allocation deficit."""

    name = "hetero"

    def __init__(self, config: HeteroConfig | None = None) -> None:
        self.config = config or HeteroConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> HeteroPolicy:
        return cls(parse_config(HeteroConfig, cls.name, config))

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        import numpy as np

        infos = type_infos(snapshot)
        types = list(infos)
        live = [j for j in jobs if j.remaining_work > 0]
        table = PredictedThroughputs(oracle, live, infos, size_bounds)
        raw = np.array([[table.peak(j, t)[1] for t in types] for j in live], dtype=float).reshape(
            len(live), len(types)
        )
        best = raw.max(axis=1, initial=0.0)
        norm = np.divide(raw, best[:, None], out=np.zeros_like(raw), where=best[:, None] > 0)
        peaks = [[table.peak(j, t)[0] * j.gpus_per_replica for t in types] for j in live]
        gpus = np.array(peaks, dtype=float).reshape(len(live), len(types))
        capacity = np.array([infos[t].capacity for t in types], dtype=float)
        share = solve_fractional(norm, gpus, capacity, self.config.objective)
        extra: dict[str, Decision] = {}
        keyed: list[tuple[float, float, str, Job, tuple[str, ...], float]] = []
        for i, j in enumerate(live):
            if best[i] <= 0:
                extra[j.name] = Decision(
                    j.name, None, "predicted throughput is 0 on every allowed GPU type", unresolvable=True
                )
                continue
            planned = float(share[i].sum())
            age = max(1.0, snapshot.now - j.submit_time)
            received = min(1.0, j.attained_service / (max(1, j.max_gpus) * age))
            deficit = planned - received
            order = sorted(
                (t for k, t in enumerate(types) if raw[i, k] > 0),
                key=lambda t: (-share[i, types.index(t)], -norm[i, types.index(t)], t),
            )
            keyed.append((-deficit, j.submit_time, j.name, j, tuple(order), planned))
        keyed.sort(key=lambda x: (x[0], x[1], x[2]))
        requests = [
            Request(
                j,
                order,
                replica_options(j),
                rank=neg,
                note=f"planned time share {planned:.2f}, deficit {-neg:.2f}",
            )
            for neg, _, _, j, order, planned in keyed
        ]
        return greedy_allocate(
            snapshot,
            jobs,
            requests,
            preemptive=self.config.preemptive,
            preempt_margin=self.config.preempt_margin,
            extra=extra,
        )
