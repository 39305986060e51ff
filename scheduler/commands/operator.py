"""``perfsched operator``: run the TrainingJob operator (rounds loop, leader election, /metrics).

CLI command module (I/O): reads settings from ``PERFSCHED_*`` (policy spec ``NAME[:key=value;...]`` and
its base JSON config, round period, restart/resize costs, minimum resize interval, backoff limit, Lease),
the kubeconfig from ``--kubeconfig``, ``KUBECONFIG`` or the in-cluster service account, builds the policy
(``--policy SPEC`` overrides ``PERFSCHED_OPERATOR_POLICY``; a bad spec, key or value exits 2 naming the
option or variable), loads the throughput predictor with online correction, and runs until
SIGTERM/SIGINT, releasing the leader Lease on the way out. ``--once`` runs a single round and prints
what it did (useful to debug a policy against a live cluster). Heavy imports happen inside the command.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from scheduler.core.protocols import Policy
    from scheduler.k8s.kubeapi import KubeApi, RealKubeApi
    from scheduler.operator.adopted import Adopter
    from scheduler.operator.leader import LeaseElector
    from scheduler.operator.reconcile import Operator, OperatorConfig
    from scheduler.settings import Settings

log = logging.getLogger(__name__)

_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _own_namespace() -> str:
    try:
        with open(_SA_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def register(app: typer.Typer) -> None:
    app.command("operator")(operator)


def operator(
    kubeconfig: str = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster config)."
    ),
    policy: str = typer.Option(
        None,
        "--policy",
        help="Policy spec NAME[:key=value;...], e.g. las:heterogeneity=agnostic "
        "(default: PERFSCHED_OPERATOR_POLICY).",
    ),
    once: bool = typer.Option(False, "--once", help="Run one round (no leader election), print it, exit."),
) -> None:
    """Run the TrainingJob operator: admit, order, start, resize and preempt jobs by policy."""
    from scheduler.k8s.connect import api_client
    from scheduler.k8s.kubeapi import RealKubeApi
    from scheduler.operator.reconcile import Operator
    from scheduler.oracles.learning import CorrectedOracle
    from scheduler.settings import configure_logging, load_settings

    settings = load_settings()
    configure_logging(settings)
    pol, policy_name = _policy(settings, policy)
    from perfmodel import zoo

    oracle = CorrectedOracle.load()
    api = RealKubeApi(api_client(kubeconfig))
    identity = settings.operator_identity or f"{socket.gethostname()}-{os.getpid()}"
    elector = _elector(settings, api, identity) if settings.operator_leader_elect and not once else None
    op = Operator(
        api,
        pol,
        oracle,
        # ``--once`` neither restores nor writes the learning state (a leader may be running)
        config=replace(_operator_config(settings, identity), learning_state_configmap="")
        if once
        else _operator_config(settings, identity),
        may_act=elector.is_leader if elector is not None else (lambda: True),
        known_model=lambda m: zoo.lookup_model(m) is not None,
        adopter=_adopter(settings, api, elector, identity),
    )
    if once:
        _run_once(op)
    _run_loop(settings, op, api, elector, identity, policy_name)


def _policy(settings: Settings, policy: str | None) -> tuple[Policy, str]:
    """The policy ``--policy`` (else ``PERFSCHED_OPERATOR_POLICY``) names, and its canonical spec text;
    a ``ConfigError`` names the option or variable."""
    from scheduler.core.errors import ConfigError
    from scheduler.policies import check_single_spec, make_policy_from_spec

    # settings already checked PERFSCHED_OPERATOR_POLICY; --policy is checked here, named as such
    where = "--policy" if policy is not None else "PERFSCHED_OPERATOR_POLICY"
    try:
        spec = check_single_spec(policy if policy is not None else settings.operator_policy)
        pol = make_policy_from_spec(spec, settings.operator_policy_config)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return pol, spec.text


def _elector(settings: Settings, api: KubeApi, identity: str) -> LeaseElector:
    """The leader elector on the Lease the settings name (in the pod's own namespace by default)."""
    from scheduler.operator.leader import LeaseElector

    return LeaseElector(
        api,
        namespace=settings.operator_lease_namespace or _own_namespace(),
        name=settings.operator_lease_name,
        identity=identity,
        lease_duration_s=settings.operator_lease_duration_seconds,
        renew_deadline_s=settings.operator_renew_deadline_seconds,
        retry_period_s=settings.operator_retry_period_seconds,
    )


def _adopter(
    settings: Settings, api: RealKubeApi, elector: LeaseElector | None, identity: str
) -> Adopter | None:
    """Adopted Jobs, JobSets and TrainJobs (``PERFSCHED_OPERATOR_ADOPT_WORKLOADS``), through ``api``."""
    if not settings.operator_adopt_workloads:
        return None
    from perfmodel import zoo
    from scheduler.k8s.adopt import RealWorkloadApi
    from scheduler.operator.adopted import Adopter

    return Adopter(
        RealWorkloadApi(api),
        may_act=elector.is_leader if elector is not None else (lambda: True),
        instance=identity,
        known_model=lambda m: zoo.lookup_model(m) is not None,
        namespace=settings.namespace,
        start_timeout_s=settings.operator_gang_start_timeout_seconds,
        backoff_limit=settings.operator_backoff_limit,
        requeue_backoff_s=settings.operator_requeue_backoff_seconds,
        requeue_backoff_max_s=settings.operator_requeue_backoff_max_seconds,
    )


def _operator_config(settings: Settings, identity: str) -> OperatorConfig:
    from scheduler.core.round import RoundCosts
    from scheduler.core.slow_nodes import SlowNodeConfig
    from scheduler.operator.reconcile import OperatorConfig

    return OperatorConfig(
        namespace=settings.namespace,
        costs=RoundCosts(
            restart_cost_s=settings.operator_restart_cost_seconds,
            resize_cost_s=settings.operator_resize_cost_seconds,
            min_resize_interval_s=settings.operator_min_resize_interval_seconds,
        ),
        backoff_limit=settings.operator_backoff_limit,
        gang_start_timeout_s=settings.operator_gang_start_timeout_seconds,
        requeue_backoff_s=settings.operator_requeue_backoff_seconds,
        requeue_backoff_max_s=settings.operator_requeue_backoff_max_seconds,
        node_failure_grace_s=settings.operator_node_failure_grace_seconds,
        exclude_slow_nodes=settings.operator_exclude_slow_nodes,
        move_off_slow_nodes=settings.operator_move_off_slow_nodes,
        slow_nodes=SlowNodeConfig(
            window_s=settings.operator_slow_node_window_seconds,
            confirm_s=settings.operator_slow_node_confirm_seconds,
        ),
        master_port=settings.operator_master_port,
        instance=identity,
        workload_api=settings.operator_workload_api,
        api_concurrency=settings.operator_api_concurrency,
        learning_state_configmap=settings.operator_learning_state_configmap,
        learning_state_namespace=settings.operator_lease_namespace or _own_namespace(),
        learning_state_interval_s=settings.operator_learning_state_interval_seconds,
    )


def _run_once(op: Operator) -> NoReturn:
    """``--once``: one round, printed; exits 1 when the round had errors."""
    rep = op.run_round()
    for kind, jobs in sorted(rep.actions.items()):
        typer.echo(f"{kind}: {', '.join(jobs)}")
    for job, why in sorted(rep.waiting.items()):
        typer.echo(f"waiting: {job}: {why}")
    for err in rep.errors:
        typer.echo(f"error: {err}", err=True)
    raise typer.Exit(1 if rep.errors else 0)


def _run_loop(
    settings: Settings,
    op: Operator,
    api: KubeApi,
    elector: LeaseElector | None,
    identity: str,
    policy_name: str,
) -> None:
    """The rounds loop with /metrics and health, until SIGTERM or SIGINT."""
    import signal
    import threading

    from scheduler.operator.loop import OperatorLoop, serve_http

    loop = OperatorLoop(
        op,
        api,
        elector=elector,
        period_s=settings.operator_round_period_seconds,
        min_interval_s=settings.operator_min_round_interval_seconds,
        namespace=settings.namespace,
    )
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        log.info("stopping", extra={"signal": signum})
        stop.set()
        loop.trigger()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server = None
    webhook = None
    if settings.operator_webhook_port:
        from scheduler.operator.webhook_server import NamespaceQueues, serve_webhook

        webhook, _ = serve_webhook(
            settings.operator_webhook_host,
            settings.operator_webhook_port,
            settings.operator_webhook_cert_file,
            settings.operator_webhook_key_file,
            NamespaceQueues(api),
            on_admit=loop.trigger,
            only_namespace=settings.namespace,
        )
    if settings.operator_metrics_port:
        server, _ = serve_http(
            settings.operator_metrics_host, settings.operator_metrics_port, loop.healthy, loop.not_ready
        )
    log.info(
        "operator started",
        extra={"identity": identity, "policy": policy_name, "leader_election": elector is not None},
    )
    try:
        loop.run(stop)
    finally:
        if webhook is not None:
            webhook.shutdown()
        if server is not None:
            server.shutdown()
