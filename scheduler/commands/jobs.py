"""``perfsched jobs``: list the batch/v1 Jobs, JobSets and TrainJobs perfsched adopted, with its view.

CLI command module (I/O). Reads every object of the three kinds (a kind whose CRD is not installed is
skipped) and prints, for those labelled ``perfsched.dev/queue``, the ``perfsched.dev/status`` annotation
the operator writes: phase, queue, GPU type, replicas, predicted throughput, ETA and why it waits
(``docs/job-kinds.md``). ``--json`` prints the rows as JSON. Exit 0; 1 when the API server cannot be
reached; 2 for a kubeconfig that cannot be loaded. Heavy imports happen inside the command.
"""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)


def jobs(
    kubeconfig: str = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster config)."
    ),
    namespace: str = typer.Option("", "--namespace", "-n", help="Only this namespace (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
) -> None:
    """List adopted Jobs, JobSets and TrainJobs: phase, queue, GPU type, prediction, why they wait."""
    from scheduler.core.errors import ConfigError, PerfschedError
    from scheduler.k8s.adopt import LIST_COLUMNS, WORKLOAD_KINDS, RealWorkloadApi, list_rows
    from scheduler.k8s.connect import api_client
    from scheduler.k8s.kubeapi import RealKubeApi

    api = RealWorkloadApi(RealKubeApi(api_client(kubeconfig), attempts=2))  # a bad kubeconfig: exit 2
    try:
        rows = [r for kind in WORKLOAD_KINDS.values() for r in list_rows(kind, api.list_workloads(kind))]
    except ConfigError:
        raise
    except PerfschedError as exc:
        typer.echo(f"perfsched jobs: {exc}", err=True)
        raise typer.Exit(1) from None
    rows = [r for r in rows if not namespace or r["NAMESPACE"] == namespace]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no adopted jobs (label a Job, JobSet or TrainJob with perfsched.dev/queue: <queue>)")
        return
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in LIST_COLUMNS[:-1]}
    typer.echo("  ".join(c.ljust(widths[c]) for c in LIST_COLUMNS[:-1]) + "  MESSAGE")
    for r in rows:
        typer.echo("  ".join(r[c].ljust(widths[c]) for c in LIST_COLUMNS[:-1]) + "  " + r["MESSAGE"])
