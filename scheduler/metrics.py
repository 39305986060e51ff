"""Every Prometheus metric perfsched exports, documented, in one place (prefix ``perfsched_``).

Shells import the metric objects from here; pure layers never do. Units are in the names
(``_seconds``, ``_total``, ``_ratio``). ``docs/metrics.md`` is the user-facing reference of this file.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

#: The registry every perfsched metric is registered on (also served by ``/metrics``).
REGISTRY = CollectorRegistry(auto_describe=True)

# --- extender (scheduler/extender) -----------------------------------------------------------------
from prometheus_client import Counter, Gauge, Histogram  # noqa: E402

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.006, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_NODE_COUNT_BUCKETS = (0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

#: Seconds the extender spent answering one kube-scheduler call, by verb (filter|prioritize|bind|preempt).
EXTENDER_REQUEST_SECONDS = Histogram(
    "perfsched_extender_request_duration_seconds",
    "Time to answer one kube-scheduler extender call, by verb.",
    ["verb"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
#: Extender calls by verb and HTTP status code (4xx = bad request bodies).
EXTENDER_REQUESTS = Counter(
    "perfsched_extender_requests_total",
    "Extender calls answered, by verb and HTTP status code.",
    ["verb", "code"],
    registry=REGISTRY,
)
#: Candidate nodes per filter call: stage="in" as sent by kube-scheduler, stage="passed" as returned.
EXTENDER_FILTER_NODES = Histogram(
    "perfsched_extender_filter_nodes",
    "Candidate nodes per filter call, as sent (stage=in) and as passed (stage=passed).",
    ["stage"],
    buckets=_NODE_COUNT_BUCKETS,
    registry=REGISTRY,
)
#: Nodes rejected by filter, by reason category (insufficient_free_gpus, gpu_type, outside_gang_placement...).
EXTENDER_REJECTIONS = Counter(
    "perfsched_extender_filter_rejections_total",
    "Nodes the extender's filter rejected, by reason category.",
    ["reason"],
    registry=REGISTRY,
)
#: Bind results: success, error (permanent, e.g. pod gone or bound elsewhere), temporary_error (API down).
EXTENDER_BINDS = Counter(
    "perfsched_extender_binds_total",
    "Bind calls by result.",
    ["result"],
    registry=REGISTRY,
)
#: Gang plans checked against pods read from the API server before filter passes their nodes, by result:
#: fresh (the read showed what the watch had), replanned (it showed pods the watch had not delivered yet,
#: and the gang was planned again on them), error (the read failed: the nodes were refused, to retry).
EXTENDER_PLAN_CHECKS = Counter(
    "perfsched_extender_plan_checks_total",
    "Gang plans checked against a read of the API server before their first replica, by result.",
    ["result"],
    registry=REGISTRY,
)
#: Gang placements recorded on TrainingJobs (status.placement), by result (success|error).
EXTENDER_PLACEMENT_RECORDS = Counter(
    "perfsched_extender_placement_records_total",
    "Placement records written to TrainingJob status, by result.",
    ["result"],
    registry=REGISTRY,
)
#: Seconds since the extender's cache last heard from the API about a kind (nodes|pods|trainingjobs).
EXTENDER_CACHE_AGE_SECONDS = Gauge(
    "perfsched_extender_cache_age_seconds",
    "Seconds since the last list or watch event, by kind.",
    ["kind"],
    registry=REGISTRY,
)
#: Watch restarts by kind and reason (ended: server closed it; error: dropped; gone: 410, relisted).
EXTENDER_WATCH_RESTARTS = Counter(
    "perfsched_extender_watch_restarts_total",
    "Watch restarts of the extender's cache, by kind and reason.",
    ["kind", "reason"],
    registry=REGISTRY,
)
#: Batched calls from the extender to the throughput predictor, and the (job, shape) rows they held.
EXTENDER_PREDICTOR_CALLS = Counter(
    "perfsched_extender_predictor_calls_total",
    "Batched throughput-predictor calls made by the extender's prioritize.",
    registry=REGISTRY,
)
EXTENDER_PREDICTOR_ROWS = Counter(
    "perfsched_extender_predictor_rows_total",
    "(job, placement) rows looked up by prioritize, by result (hit: memoised, miss: sent to the predictor).",
    ["result"],
    registry=REGISTRY,
)
#: Fraction of prioritize's (job, placement) lookups answered from the extender's memo since start.
EXTENDER_PREDICTOR_HIT_RATIO = Gauge(
    "perfsched_extender_predictor_cache_hit_ratio",
    "Fraction of prediction lookups answered from the extender's memo since start.",
    registry=REGISTRY,
)
#: Extender failures that are not the caller's fault (a bug, the predictor, the API server), by verb
#: (filter|prioritize|bind|preempt|predict); each is also logged with the request that met it.
EXTENDER_ERRORS = Counter(
    "perfsched_extender_errors_total",
    "Extender calls that met an internal or upstream error (not a bad request), by verb.",
    ["verb"],
    registry=REGISTRY,
)

# --- operator (scheduler/operator) -----------------------------------------------------------------

_ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
_ERROR_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0)

#: TrainingJobs by status.phase (Pending, Admitted, Running, Resizing, Preempted, Succeeded, Failed).
OPERATOR_JOBS = Gauge(
    "perfsched_operator_jobs",
    "TrainingJobs the operator sees, by phase, as of its last round.",
    ["phase"],
    registry=REGISTRY,
)
#: Rounds run, by result (ok | error | skipped_not_leader).
OPERATOR_ROUNDS = Counter(
    "perfsched_operator_rounds_total",
    "Scheduling rounds run by the operator, by result.",
    ["result"],
    registry=REGISTRY,
)
#: Seconds of one round: phase="policy" (run_round: policy + planning), phase="total" (list, decide, write).
OPERATOR_ROUND_SECONDS = Histogram(
    "perfsched_operator_round_duration_seconds",
    "Duration of one operator round, for the policy and planning alone and in total.",
    ["phase"],
    buckets=_ROUND_BUCKETS,
    registry=REGISTRY,
)
#: Actions applied, by kind (start, resize, preempt, complete, fail, restart).
OPERATOR_ACTIONS = Counter(
    "perfsched_operator_actions_total",
    "Lifecycle actions the operator applied, by kind.",
    ["kind"],
    registry=REGISTRY,
)
#: Seconds from a job's creation to its first start (queueing delay).
OPERATOR_QUEUE_WAIT_SECONDS = Histogram(
    "perfsched_operator_queue_wait_seconds",
    "Time from a TrainingJob's creation until its gang was first started.",
    buckets=_WAIT_BUCKETS,
    registry=REGISTRY,
)
#: Job completion time: seconds from creation to Succeeded.
OPERATOR_JCT_SECONDS = Histogram(
    "perfsched_operator_job_completion_seconds",
    "Job completion time: from a TrainingJob's creation until it Succeeded.",
    buckets=_WAIT_BUCKETS,
    registry=REGISTRY,
)
#: |predicted - observed| / observed throughput of running jobs, by GPU type (the prediction the round used).
OPERATOR_THROUGHPUT_ERROR = Histogram(
    "perfsched_operator_throughput_relative_error_ratio",
    "Relative error of predicted versus observed throughput of running jobs, by GPU type.",
    ["gpu_type"],
    buckets=_ERROR_BUCKETS,
    registry=REGISTRY,
)
#: Jobs with a deadline that finished, by outcome (met | missed).
OPERATOR_DEADLINES = Counter(
    "perfsched_operator_deadlines_total",
    "TrainingJobs with a deadline that finished, by whether the deadline was met.",
    ["outcome"],
    registry=REGISTRY,
)
#: 1 while this operator replica holds the leader Lease, else 0.
OPERATOR_LEADER = Gauge(
    "perfsched_operator_leader",
    "Whether this operator replica is the leader (1) or not (0).",
    registry=REGISTRY,
)
#: Nodes whose nvidia.com/gpu.product label maps to no canonical GPU type, by product label.
OPERATOR_UNKNOWN_GPU_PRODUCTS = Gauge(
    "perfsched_operator_unknown_gpu_product_nodes",
    "Nodes whose GPU product label is not a known GPU (they keep the raw label as their type).",
    ["product"],
    registry=REGISTRY,
)
#: How fast the jobs on a node run against the same models on its peers of the same GPU type
#: (``scheduler.core.slow_nodes``): 1 as fast, 0.6 at 60 %; nodes with samples and peers only.
NODE_SLOWDOWN_RATIO = Gauge(
    "perfsched_node_slowdown_ratio",
    "Observed/predicted throughput of the jobs on a node over that of the same models on peer nodes of its "
    "GPU type (median over models, last hour); below 0.75 on several models for 10 min the node is flagged.",
    ["node"],
    registry=REGISTRY,
)
#: Work units lost to restarts, resizes and preemptions (progress since the last checkpoint).
OPERATOR_LOST_WORK = Counter(
    "perfsched_operator_lost_work_units_total",
    "Work units (iterations or samples) lost to restarts, resizes and preemptions.",
    ["unit"],
    registry=REGISTRY,
)
#: Running jobs restarted on other GPUs without waiting (``scheduler.core.planner.is_migration``), by
#: GPU type before and after; preemptions (the job waits) are counted in ``OPERATOR_ACTIONS`` instead.
OPERATOR_MIGRATIONS = Counter(
    "perfsched_operator_migrations_total",
    "Running TrainingJobs moved to other GPUs (another GPU type or other nodes) in one restart.",
    ["from_type", "to_type"],
    registry=REGISTRY,
)
#: API write failures of the operator, by operation (retried next round).
OPERATOR_API_ERRORS = Counter(
    "perfsched_operator_api_errors_total",
    "Kubernetes API calls of the operator that failed after retries, by operation.",
    ["operation"],
    registry=REGISTRY,
)
#: Failures of the operator's own steps that it survives (step: predict | learn), also logged.
OPERATOR_ERRORS = Counter(
    "perfsched_operator_errors_total",
    "Failures inside the operator that a round survives (prediction, online learning), by step.",
    ["step"],
    registry=REGISTRY,
)

# --- the learning state (operator; scheduler.operator.learning_state, docs/learning-state.md) ----------
# The write metrics are set by the leader only, when it writes; the restore metrics by a process as it
# starts to lead.

#: Compressed bytes of the learning state the leader last wrote (the bound is 900 KiB: trimmed above it).
LEARNING_STATE_BYTES = Gauge(
    "perfsched_operator_learning_state_bytes",
    "Compressed size of the learning state the leader last wrote to its ConfigMap (trimmed above 900 KiB).",
    registry=REGISTRY,
)
#: What the last written state holds, by kind: live (live jobs' records), ended (ended jobs' records in the
#: shared levels), held_out (held-out answers), finished (finished jobs listed as learnt).
LEARNING_STATE_RECORDS = Gauge(
    "perfsched_operator_learning_state_records",
    "Records in the learning state the leader last wrote, by kind (live, ended, held_out, finished).",
    ["kind"],
    registry=REGISTRY,
)
#: What trimming left out of the last written state, by kind (as ``LEARNING_STATE_RECORDS``; 0: it fit).
LEARNING_STATE_TRIMMED = Gauge(
    "perfsched_operator_learning_state_trimmed_records",
    "Records trimming left out of the learning state the leader last wrote, by kind (0 when it fit).",
    ["kind"],
    registry=REGISTRY,
)
#: When the leader last wrote the learning state (seconds since the epoch).
LEARNING_STATE_LAST_WRITE = Gauge(
    "perfsched_operator_learning_state_last_write_timestamp_seconds",
    "When the leader last wrote the learning state to its ConfigMap (Unix time).",
    registry=REGISTRY,
)
#: Seconds from the restored state's write to its restore, as this process started to lead.
LEARNING_STATE_RESTORED_AGE = Gauge(
    "perfsched_operator_learning_state_restored_age_seconds",
    "Age of the learning state this process restored as it started to lead (from its write to the restore).",
    registry=REGISTRY,
)
#: The leader's writes, by outcome (written | unchanged | trimmed | conflict | error).
LEARNING_STATE_WRITES = Counter(
    "perfsched_operator_learning_state_writes_total",
    "Learning-state writes the leader tried, by outcome (written, unchanged, trimmed: written after "
    "trimming, conflict: raced another writer, error).",
    ["outcome"],
    registry=REGISTRY,
)
#: Restores as a process starts to lead, by outcome (restored | missing | unreadable | corrupt | schema |
#: model | settings): every outcome but restored and missing falls back to the replay and is logged.
LEARNING_STATE_RESTORES = Counter(
    "perfsched_operator_learning_state_restores_total",
    "Learning-state restores as a process starts to lead, by outcome (restored, missing, or why it was "
    "unusable: unreadable, corrupt, schema, model, settings).",
    ["outcome"],
    registry=REGISTRY,
)

# --- dashboard and alerts (helm/perfsched/files) --------------------------------------------------------
# Needed by the Grafana dashboard ("GPUs allocated vs capacity by GPU type") and the
# PerfschedJobsWaitingTooLong alert; the operator sets them once per round from its snapshot
# (``record_cluster_gauges``), so they are as fresh as the last round.

#: GPUs perfsched may hand out (allocatable minus external use, schedulable nodes only), by GPU type.
CLUSTER_GPUS = Gauge(
    "perfsched_cluster_gpus",
    "GPUs perfsched may hand out, by canonical GPU type, as of the operator's last round.",
    ["gpu_type"],
    registry=REGISTRY,
)
#: GPUs held by TrainingJob allocations, by GPU type.
CLUSTER_GPUS_ALLOCATED = Gauge(
    "perfsched_cluster_gpus_allocated",
    "GPUs allocated to TrainingJobs, by canonical GPU type, as of the operator's last round.",
    ["gpu_type"],
    registry=REGISTRY,
)
#: Seconds the longest-waiting not-yet-started TrainingJob has waited (0 when none waits).
OLDEST_WAITING_SECONDS = Gauge(
    "perfsched_operator_oldest_waiting_job_seconds",
    "Seconds since creation of the oldest TrainingJob that waits to start (0 when none waits).",
    registry=REGISTRY,
)


def record_cluster_gauges(
    capacity_by_type: dict[str, int], allocated_by_type: dict[str, int], oldest_wait_s: float
) -> None:
    """Set the cluster gauges from one round: every GPU type of ``capacity_by_type`` gets both series."""
    for gpu_type in sorted(set(capacity_by_type) | set(allocated_by_type)):
        CLUSTER_GPUS.labels(gpu_type).set(capacity_by_type.get(gpu_type, 0))
        CLUSTER_GPUS_ALLOCATED.labels(gpu_type).set(allocated_by_type.get(gpu_type, 0))
    OLDEST_WAITING_SECONDS.set(max(0.0, oldest_wait_s))


# --- tenant queues (operator; scheduler.operator.queues) ----------------------------------------------

#: A TrainingQueue's nominal quota, by queue and GPU type (types of the cluster; "*" resolved per type).
QUEUE_NOMINAL_GPUS = Gauge(
    "perfsched_queue_nominal_gpus",
    "GPUs of the type a TrainingQueue may always use (its nominal quota), as of the operator's last round.",
    ["queue", "gpu_type"],
    registry=REGISTRY,
)
#: GPUs a TrainingQueue's jobs hold, by queue and GPU type.
QUEUE_GPUS = Gauge(
    "perfsched_queue_gpus",
    "GPUs of the type held by a TrainingQueue's jobs, as of the operator's last round.",
    ["queue", "gpu_type"],
    registry=REGISTRY,
)
#: GPUs held beyond the nominal quota (borrowed from the cohort), by queue and GPU type.
QUEUE_BORROWED_GPUS = Gauge(
    "perfsched_queue_borrowed_gpus",
    "GPUs of the type a TrainingQueue holds beyond its nominal quota (borrowed from its cohort).",
    ["queue", "gpu_type"],
    registry=REGISTRY,
)
#: TrainingJobs of a queue that wait.
QUEUE_PENDING_JOBS = Gauge(
    "perfsched_queue_pending_jobs",
    "TrainingJobs of a TrainingQueue that wait to run, as of the operator's last round.",
    ["queue"],
    registry=REGISTRY,
)
#: A queue's share per unit of weight over the mean of all queues (1 = its fair share; 0 = nothing): the
#: share is delivered throughput normalised per job to its fastest GPU type (``fairShare: throughput``)
#: or GPUs (``fairShare: gpus``), the figure admission evens out.
QUEUE_FAIR_SHARE_RATIO = Gauge(
    "perfsched_queue_fair_share_ratio",
    "A TrainingQueue's share (normalised delivered throughput, or GPUs for fairShare: gpus) per unit of "
    "weight over the mean of all queues (1 = fair share).",
    ["queue"],
    registry=REGISTRY,
)


def record_queue_gauges(
    nominal: dict[str, dict[str, int]],
    usage: dict[str, dict[str, int]],
    pending: dict[str, int],
    ratio: dict[str, float],
) -> None:
    """Set the queue gauges from one round (series of queues or types that went away are dropped)."""
    for g in (
        QUEUE_NOMINAL_GPUS,
        QUEUE_GPUS,
        QUEUE_BORROWED_GPUS,
        QUEUE_PENDING_JOBS,
        QUEUE_FAIR_SHARE_RATIO,
    ):
        g.clear()
    for queue, per_type in nominal.items():
        used = usage.get(queue, {})
        for gpu_type in sorted(set(per_type) | set(used)):
            n, u = per_type.get(gpu_type, 0), used.get(gpu_type, 0)
            QUEUE_NOMINAL_GPUS.labels(queue, gpu_type).set(n)
            QUEUE_GPUS.labels(queue, gpu_type).set(u)
            QUEUE_BORROWED_GPUS.labels(queue, gpu_type).set(max(0, u - n))
        QUEUE_PENDING_JOBS.labels(queue).set(pending.get(queue, 0))
        QUEUE_FAIR_SHARE_RATIO.labels(queue).set(ratio.get(queue, 0.0))


# --- API server outages (every long-running component; scheduler.k8s.errors.ApiHealth) -------------

#: Seconds the component could not reach the Kubernetes API server, by component (operator, emulator,
#: extender). Grows during an outage, by at most the component's retry interval behind the wall clock.
API_UNAVAILABLE_SECONDS = Counter(
    "perfsched_api_unavailable_seconds",
    "Seconds the component found the Kubernetes API server unreachable (transport errors, timeouts, 5xx).",
    ["component"],
    registry=REGISTRY,
)
