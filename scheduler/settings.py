"""perfsched's runtime settings: one pydantic-settings object read from ``PERFSCHED_*`` variables.

Validated at start-up; a bad value fails fast with a message naming the variable. Each shell (extender,
operator, training worker) reads the fields it needs from the same object. Edge module (pydantic).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from scheduler.core.errors import ConfigError
from scheduler.policies import DEFAULT_POLICY_SPEC, check_single_spec, make_policy_from_spec


class Settings(BaseSettings):
    """All settings, grouped by the component that reads them. Environment prefix ``PERFSCHED_``."""

    model_config = SettingsConfigDict(env_prefix="PERFSCHED_", extra="ignore")

    # --- shared ------------------------------------------------------------------------------------
    log_level: str = "INFO"
    namespace: str = ""  # empty = all namespaces

    # --- extender (scheduler/extender, `perfsched extender`) -----------------------------------------
    #: address and port `perfsched extender` listens on (kube-scheduler's `urlPrefix` points here)
    extender_host: str = "127.0.0.1"
    extender_port: int = Field(default=8888, ge=1, le=65535)
    #: weights of the prioritize terms (normalised, so only their ratio matters; at least one > 0)
    extender_weight_throughput: float = Field(default=6.0, ge=0)
    extender_weight_locality: float = Field(default=3.0, ge=0)
    extender_weight_packing: float = Field(default=1.0, ge=0)
    #: request bodies larger than this are refused with 413 (5,000 full Node objects are ~10 MiB)
    extender_max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    #: how long GPUs reserved by a bind stay counted if the watch never shows the pod bound
    extender_assume_ttl_seconds: float = Field(default=60.0, gt=0)
    #: how long the GPUs the operator planned for a gang stay held for it (other pods are filtered off
    #: them) if the gang does not bind; and how long a gang waits for a plan that does not fit yet before
    #: it is placed afresh (no longer than the hold: the wait needs the held GPUs)
    extender_plan_hold_seconds: float = Field(default=30.0, gt=0, le=3600)
    extender_plan_wait_seconds: float = Field(default=5.0, ge=0, le=3600)
    #: server-side timeout of each watch request (the cache resumes from its resourceVersion after it)
    extender_watch_timeout_seconds: int = Field(default=300, ge=10)
    #: (job, placement) predictions memoised by prioritize
    extender_predict_cache_size: int = Field(default=4096, ge=0)
    #: record each bound pod's node in its TrainingJob's status.placement
    extender_record_placement: bool = True
    #: serve HTTPS with this PEM certificate and key (both or neither; kube-scheduler's ``enableHTTPS``)
    extender_tls_cert_file: str = ""
    extender_tls_key_file: str = ""

    # --- training workers (scheduler.worker.ProgressReporter, set from the downward API) ---------------
    pod_name: str = ""
    pod_namespace: str = ""
    #: least wall seconds between two progress annotations a worker writes
    worker_report_interval_seconds: float = Field(default=10.0, gt=0)

    # --- operator (scheduler/operator, `perfsched operator`) --------------------------------------------
    #: scheduling policy as a spec, ``NAME[:key=value;...]`` (``scheduler.policies``, e.g.
    #: ``las:heterogeneity=agnostic``), and a base config (JSON object) that the spec's keys override
    operator_policy: str = DEFAULT_POLICY_SPEC
    operator_policy_config: dict[str, Any] = Field(default_factory=dict)
    #: seconds between rounds; rounds also run on TrainingJob/pod/node events, at most every min interval
    operator_round_period_seconds: float = Field(default=5.0, gt=0)
    operator_min_round_interval_seconds: float = Field(default=0.5, ge=0)
    #: what restarting and resizing a running job costs (seconds of lost time the planner charges)
    operator_restart_cost_seconds: float = Field(default=30.0, ge=0)
    operator_resize_cost_seconds: float = Field(default=10.0, ge=0)
    #: a running job is not resized or moved again sooner than this after its last change
    operator_min_resize_interval_seconds: float = Field(default=60.0, ge=0)
    #: worker crashes, and separately start timeouts, a job may have before it is marked Failed
    #: (``spec.backoffLimit`` overrides it per job); an adopted job past it stays suspended
    operator_backoff_limit: int = Field(default=3, ge=0, le=100)
    #: a gang whose replicas are not all Running this long after it started is stopped, its GPUs released,
    #: and requeued with exponential backoff (0: never; ``spec.startTimeoutSeconds`` overrides it per job);
    #: an adopted job's pods get as long from its admission (``perfsched.dev/start-timeout-seconds``)
    operator_gang_start_timeout_seconds: float = Field(default=300.0, ge=0, le=86400)
    #: the first wait after a start timeout; each further one doubles, up to the maximum
    operator_requeue_backoff_seconds: float = Field(default=30.0, ge=0)
    operator_requeue_backoff_max_seconds: float = Field(default=1800.0, ge=0)
    #: a GPU node NotReady longer than this fails: its gangs restart elsewhere from their checkpoints
    operator_node_failure_grace_seconds: float = Field(default=60.0, ge=0)
    #: keep new gangs off a node flagged slow (``perfsched_node_slowdown_ratio``); what runs there stays
    operator_exclude_slow_nodes: bool = False
    #: also move running gangs off a node flagged slow when the predicted gain pays the restart (free
    #: healthy GPUs only; implies ``operator_exclude_slow_nodes``)
    operator_move_off_slow_nodes: bool = False
    #: slow-node detection reads the progress reports of this window; a node is flagged only once its
    #: reports span the confirmation time (``scheduler.core.slow_nodes.SlowNodeConfig``)
    operator_slow_node_window_seconds: float = Field(default=3600.0, gt=0, le=7 * 86400)
    operator_slow_node_confirm_seconds: float = Field(default=600.0, ge=0)
    #: leader election on a coordination.k8s.io Lease (namespace empty: the operator's own namespace,
    #: from the service account, else "default")
    operator_leader_elect: bool = True
    operator_lease_name: str = "perfsched-operator"
    operator_lease_namespace: str = ""
    operator_lease_duration_seconds: float = Field(default=15.0, gt=0)
    operator_renew_deadline_seconds: float = Field(default=10.0, gt=0)
    operator_retry_period_seconds: float = Field(default=2.0, gt=0)
    #: the ConfigMap, in the namespace of the operator's Lease, where the leader keeps what the learning
    #: oracle learnt, restored by the next leader (``scheduler.operator.learning_state``); empty: not kept
    #: (a new process replays the finished TrainingJobs still listed)
    operator_learning_state_configmap: str = "perfsched-operator-learning-state"
    #: the leader writes the learning state at most this often, and only when it changed
    operator_learning_state_interval_seconds: float = Field(default=60.0, ge=1, le=86400)
    #: this replica's identity in the Lease (empty: hostname + pid)
    operator_identity: str = ""
    #: port of the operator's /metrics and /healthz (0: not served)
    operator_metrics_port: int = Field(default=9090, ge=0, le=65535)
    operator_metrics_host: str = "0.0.0.0"
    #: MASTER_PORT given to the workers (the port of the job's headless Service)
    operator_master_port: int = Field(default=29500, ge=1, le=65535)
    #: jobs whose API writes the operator sends concurrently within a round
    operator_api_concurrency: int = Field(default=8, ge=1, le=64)
    #: a scheduling.k8s.io/v1beta1 Workload and PodGroup per gang generation, so that kube-scheduler binds
    #: each gang all or nothing (Kubernetes 1.37 with the GenericWorkload and GangScheduling feature gates;
    #: docs/workload-api.md). Off by default until the API is GA.
    operator_workload_api: bool = False
    #: schedule batch/v1 Jobs, JobSets and TrainJobs labelled perfsched.dev/queue (docs/job-kinds.md)
    operator_adopt_workloads: bool = True
    #: HTTPS port of the mutating webhook that suspends them at creation (0: not served)
    operator_webhook_port: int = Field(default=0, ge=0, le=65535)
    operator_webhook_host: str = "0.0.0.0"
    #: PEM certificate and key the webhook serves (required with a webhook port)
    operator_webhook_cert_file: str = ""
    operator_webhook_key_file: str = ""

    @model_validator(mode="after")
    def _operator_webhook(self) -> Settings:
        if self.operator_webhook_port and not (
            self.operator_webhook_cert_file and self.operator_webhook_key_file
        ):
            raise ValueError(
                "PERFSCHED_OPERATOR_WEBHOOK_PORT is set: PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE and "
                "PERFSCHED_OPERATOR_WEBHOOK_KEY_FILE must name the PEM certificate and key it serves"
            )
        return self

    @model_validator(mode="after")
    def _operator_lease(self) -> Settings:
        if not self.operator_renew_deadline_seconds < self.operator_lease_duration_seconds:
            raise ValueError(
                "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS must be smaller than "
                "PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS (a leader must stop before its Lease can expire)"
            )
        if not self.operator_retry_period_seconds < self.operator_renew_deadline_seconds:
            raise ValueError(
                "PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS must be smaller than "
                "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS"
            )
        return self

    @model_validator(mode="after")
    def _operator_slow_nodes(self) -> Settings:
        if self.operator_slow_node_confirm_seconds > self.operator_slow_node_window_seconds:
            raise ValueError(
                "PERFSCHED_OPERATOR_SLOW_NODE_CONFIRM_SECONDS must not exceed "
                "PERFSCHED_OPERATOR_SLOW_NODE_WINDOW_SECONDS (the reports that confirm a slow node are "
                "those of the window)"
            )
        return self

    @model_validator(mode="after")
    def _operator_policy(self) -> Settings:
        # build it once here so that a bad spec, key or value stops start-up naming the variable
        try:
            make_policy_from_spec(check_single_spec(self.operator_policy), self.operator_policy_config)
        except ConfigError as exc:
            raise ValueError(f"PERFSCHED_OPERATOR_POLICY={self.operator_policy!r}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _extender_weights(self) -> Settings:
        weights = (
            self.extender_weight_throughput,
            self.extender_weight_locality,
            self.extender_weight_packing,
        )
        if sum(weights) <= 0:
            raise ValueError(
                "PERFSCHED_EXTENDER_WEIGHT_THROUGHPUT, _LOCALITY and _PACKING are all 0: one must be > 0"
            )
        if self.extender_plan_wait_seconds > self.extender_plan_hold_seconds:
            raise ValueError(
                "PERFSCHED_EXTENDER_PLAN_WAIT_SECONDS must not exceed PERFSCHED_EXTENDER_PLAN_HOLD_SECONDS "
                "(a gang waits for its plan only while its GPUs are held)"
            )
        if bool(self.extender_tls_cert_file) != bool(self.extender_tls_key_file):
            raise ValueError(
                "PERFSCHED_EXTENDER_TLS_CERT_FILE and PERFSCHED_EXTENDER_TLS_KEY_FILE must be set together"
            )
        return self


def load_settings() -> Settings:
    """Read and validate settings from the environment.

    A bad value (or malformed JSON in a structured variable) raises ``ConfigError`` naming the variable,
    which the CLI prints as one line with exit code 2 (pydantic's multi-line report is folded into it).
    """
    try:
        return Settings()
    except ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in err.get("loc", ()))
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
        raise ConfigError(f"invalid PERFSCHED_* settings: {'; '.join(parts)}") from None
    except SettingsError as exc:
        raise ConfigError(f"invalid PERFSCHED_* settings: {exc}") from None


def configure_logging(settings: Settings) -> None:
    """Configure root logging for a long-running component (entry points only)."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # urllib3 warns on every connection retry; an API server outage is logged once by perfsched itself
    # (scheduler.k8s.errors.ApiHealth), so these would only repeat it several times a second
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
