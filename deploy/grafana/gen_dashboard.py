"""Generate perfsched's Grafana dashboard JSON (helm/perfsched/files/perfsched-dashboard.json).

The dashboard is written as a short list of panels here rather than edited as 1,000 lines of JSON, so a
metric rename is one edit. Every query uses only metrics exported by ``scheduler/metrics.py``;
tests/deploy/test_observability.py checks that, checks the PromQL parses (promtool) and that the committed
JSON equals this script's output. Run: ``python deploy/grafana/gen_dashboard.py [--check]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "helm" / "perfsched" / "files" / "perfsched-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}

# (title, panel type, unit, [(PromQL, legend)], width, description)
Panel = tuple[str, str, str, list[tuple[str, str]], int, str]

ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Extender",
        [
            (
                "Scheduling latency p50 / p99 per verb",
                "timeseries",
                "s",
                [
                    (
                        "histogram_quantile(0.5, sum by (verb, le) "
                        "(rate(perfsched_extender_request_duration_seconds_bucket[$__rate_interval])))",
                        "p50 {{verb}}",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (verb, le) "
                        "(rate(perfsched_extender_request_duration_seconds_bucket[$__rate_interval])))",
                        "p99 {{verb}}",
                    ),
                ],
                12,
                "Time the extender takes to answer kube-scheduler's filter/prioritize/bind calls.",
            ),
            (
                "Filter rejections by reason",
                "timeseries",
                "ops",
                [
                    (
                        "sum by (reason) "
                        "(rate(perfsched_extender_filter_rejections_total[$__rate_interval]))",
                        "{{reason}}",
                    )
                ],
                12,
                "Nodes the extender's filter rejected per second, by reason.",
            ),
            (
                "Extender errors",
                "timeseries",
                "ops",
                [
                    (
                        'sum by (verb, code) (rate(perfsched_extender_requests_total{code!~"2.."}'
                        "[$__rate_interval]))",
                        "{{verb}} {{code}}",
                    )
                ],
                12,
                "Extender calls answered with a non-2xx HTTP status, by verb and code.",
            ),
        ],
    ),
    (
        "Cluster and jobs",
        [
            (
                "GPUs allocated vs capacity by GPU type",
                "timeseries",
                "short",
                [
                    ("sum by (gpu_type) (perfsched_cluster_gpus_allocated)", "allocated {{gpu_type}}"),
                    ("sum by (gpu_type) (perfsched_cluster_gpus)", "capacity {{gpu_type}}"),
                ],
                12,
                "GPUs held by TrainingJobs against the GPUs perfsched may hand out, per GPU type.",
            ),
            (
                "TrainingJobs by phase",
                "timeseries",
                "short",
                [("sum by (phase) (perfsched_operator_jobs)", "{{phase}}")],
                12,
                "Number of TrainingJobs in each phase.",
            ),
            (
                "Queue waiting time p50 / p90",
                "timeseries",
                "s",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) "
                        "(rate(perfsched_operator_queue_wait_seconds_bucket[$__rate_interval])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.9, sum by (le) "
                        "(rate(perfsched_operator_queue_wait_seconds_bucket[$__rate_interval])))",
                        "p90",
                    ),
                ],
                12,
                "Time from submission to first start of jobs that started.",
            ),
            (
                "Job completion time distribution",
                "heatmap",
                "s",
                [
                    (
                        "sum by (le) "
                        "(increase(perfsched_operator_job_completion_seconds_bucket[$__rate_interval]))",
                        "{{le}}",
                    )
                ],
                12,
                "Job completion time (submission to completion) of finished jobs.",
            ),
        ],
    ),
    (
        "Predictor and lifecycle",
        [
            (
                "Predicted vs observed throughput error by GPU type",
                "timeseries",
                "percentunit",
                [
                    (
                        "sum by (gpu_type) "
                        "(rate(perfsched_operator_throughput_relative_error_ratio_sum[$__rate_interval]))"
                        " / sum by (gpu_type) "
                        "(rate(perfsched_operator_throughput_relative_error_ratio_count[$__rate_interval]))",
                        "{{gpu_type}}",
                    )
                ],
                12,
                "Mean |predicted - observed| / observed throughput of running jobs, by GPU type.",
            ),
            (
                "Resizes, preemptions and restarts",
                "timeseries",
                "ops",
                [
                    (
                        "sum by (kind) (rate(perfsched_operator_actions_total"
                        '{kind=~"resize|preempt|restart"}[$__rate_interval]))',
                        "{{kind}}",
                    )
                ],
                12,
                "Lifecycle actions the operator took per second.",
            ),
            (
                "Deadlines met",
                "stat",
                "percentunit",
                [
                    (
                        'sum(perfsched_operator_deadlines_total{outcome="met"}) / '
                        "clamp_min(sum(perfsched_operator_deadlines_total), 1)",
                        "met",
                    )
                ],
                6,
                "Share of jobs with a deadline that finished before it.",
            ),
            (
                "Operator leader",
                "stat",
                "short",
                [("max(perfsched_operator_leader)", "leader")],
                6,
                "1 while an operator replica holds the leader lease.",
            ),
        ],
    ),
    (
        "Learning state",
        [
            (
                "Learning state size",
                "timeseries",
                "bytes",
                [
                    (
                        "max(perfsched_operator_learning_state_bytes"
                        " and on (instance) perfsched_operator_leader == 1)",
                        "written",
                    )
                ],
                12,
                "Compressed size of the learning state the leader last wrote to its ConfigMap; above 900 KiB "
                "it is trimmed to fit (docs/learning-state.md).",
            ),
            (
                "Learning state records by kind",
                "timeseries",
                "short",
                [
                    (
                        "max by (kind) (perfsched_operator_learning_state_records"
                        " and on (instance) perfsched_operator_leader == 1)",
                        "{{kind}}",
                    ),
                    (
                        "max by (kind) (perfsched_operator_learning_state_trimmed_records"
                        " and on (instance) perfsched_operator_leader == 1)",
                        "trimmed {{kind}}",
                    ),
                ],
                12,
                "What the last written state holds (live and ended jobs' records, held-out answers, finished "
                "jobs listed) and what trimming left out of it.",
            ),
            (
                "Learning state writes and restores",
                "timeseries",
                "short",
                [
                    (
                        "sum by (outcome) "
                        "(increase(perfsched_operator_learning_state_writes_total[$__rate_interval]))",
                        "write {{outcome}}",
                    ),
                    (
                        "sum by (outcome) "
                        "(increase(perfsched_operator_learning_state_restores_total[$__rate_interval]))",
                        "restore {{outcome}}",
                    ),
                ],
                12,
                "The leader's writes (written, unchanged, trimmed, conflict, error) and the restores of a "
                "process that starts to lead (restored, missing, or why the state was unusable).",
            ),
            (
                "Learning state last written",
                "stat",
                "s",
                [
                    (
                        "time() - max(perfsched_operator_learning_state_last_write_timestamp_seconds)",
                        "ago",
                    )
                ],
                6,
                "Seconds since the leader last wrote the state; it writes at most once per interval and "
                "only when something was learnt, so a quiet cluster shows it growing.",
            ),
            (
                "Learning state age at restore",
                "stat",
                "s",
                [("max(perfsched_operator_learning_state_restored_age_seconds)", "age")],
                6,
                "How old the state was when the current leader restored it (what it had not learnt since "
                "is replayed from TrainingJob status or learnt from the next reports).",
            ),
        ],
    ),
    (
        "Queues",
        [
            (
                "GPUs held and nominal quota per queue",
                "timeseries",
                "short",
                [
                    ("sum by (queue) (perfsched_queue_gpus)", "{{queue}}"),
                    ("sum by (queue) (perfsched_queue_nominal_gpus)", "{{queue}} nominal"),
                ],
                12,
                "GPUs each TrainingQueue's jobs hold, and its nominal quota (all GPU types together).",
            ),
            (
                "Borrowed GPUs per queue",
                "timeseries",
                "short",
                [("sum by (queue, gpu_type) (perfsched_queue_borrowed_gpus)", "{{queue}} {{gpu_type}}")],
                12,
                "GPUs each queue holds beyond its nominal quota, lent by its cohort.",
            ),
            (
                "Pending jobs per queue",
                "timeseries",
                "short",
                [("sum by (queue) (perfsched_queue_pending_jobs)", "{{queue}}")],
                12,
                "TrainingJobs of each queue that wait.",
            ),
            (
                "Fair-share ratio per queue",
                "timeseries",
                "short",
                [("max by (queue) (perfsched_queue_fair_share_ratio)", "{{queue}}")],
                12,
                "GPUs per unit of weight over the mean of all queues: 1 is fair, below 0.5 with jobs "
                "pending for 30 minutes fires PerfschedQueueStarved.",
            ),
        ],
    ),
]


def queries() -> list[str]:
    """Every PromQL expression of the dashboard (the tests parse and check them)."""
    return [expr for _, panels in ROWS for p in panels for expr, _ in p[3]]


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    pid = 1
    y = 0
    for row_title, row_panels in ROWS:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid += 1
        y += 1
        x = 0
        for title, kind, unit, targets, width, desc in row_panels:
            if x + width > 24:
                x = 0
                y += 8
            panel: dict[str, Any] = {
                "id": pid,
                "type": kind,
                "title": title,
                "description": desc,
                "datasource": DS,
                "gridPos": {"h": 8, "w": width, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(targets)
                ],
            }
            if kind == "heatmap":
                panel["targets"][0]["format"] = "heatmap"
                panel["options"] = {"calculate": False, "yAxis": {"unit": unit}}
            panels.append(panel)
            pid += 1
            x += width
        y += 8
    return {
        "title": "perfsched",
        "uid": "perfsched-overview",
        "description": "perfsched: extender latency, GPU allocation, TrainingJob lifecycle, predictor error.",
        "tags": ["perfsched", "scheduling", "gpu"],
        "editable": True,
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed JSON is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"{OUT} is out of date: run python deploy/grafana/gen_dashboard.py")
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
