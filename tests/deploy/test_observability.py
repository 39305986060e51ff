"""The dashboard and the alerts only query metrics `scheduler/metrics.py` exports, their PromQL parses,
the alert unit tests pass under promtool, and the generated files (dashboard JSON, docs/metrics.md) are
current."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.conftest import CHART, ROOT

sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(0, str(ROOT / "deploy" / "grafana"))
import gen_dashboard
import gen_metrics_doc

RULES = CHART / "files" / "perfsched-rules.yaml"
DASHBOARD = CHART / "files" / "perfsched-dashboard.json"
METRIC = re.compile(r"\bperfsched_[a-zA-Z0-9_]+")


def exported_series() -> set[str]:
    """Every sample name a scrape of the extender and operator can show (suffixes included)."""
    return {
        s
        for family, kind, _, _ in gen_metrics_doc.registry_metrics()
        for s in gen_metrics_doc.series_names(family, kind)
    }


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, object]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_series_names_follow_the_exposition_suffixes() -> None:
    # counter x -> x_total; histogram h -> h_bucket, h_sum, h_count; gauge g -> g
    assert gen_metrics_doc.series_names("perfsched_x", "counter") == ["perfsched_x_total"]
    assert gen_metrics_doc.series_names("perfsched_h", "histogram") == [
        "perfsched_h_bucket",
        "perfsched_h_sum",
        "perfsched_h_count",
    ]
    assert gen_metrics_doc.series_names("perfsched_g", "gauge") == ["perfsched_g"]


def test_every_queried_metric_is_exported_by_the_code() -> None:
    exported = exported_series()
    queried = {m for q in dashboard_queries() for m in METRIC.findall(q)}
    queried |= {m for r in alert_rules() for m in METRIC.findall(str(r["expr"]))}
    assert queried, "no perfsched_ metric queried"
    missing = sorted(queried - exported)
    assert not missing, f"queried but not exported by scheduler/metrics.py: {missing}"


def test_dashboard_promql_parses(promtool: str, tmp_path: Path) -> None:
    # promtool has no expression checker, so each panel query becomes a recording rule
    exprs = [q.replace("$__rate_interval", "5m") for q in dashboard_queries()]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"perfsched:dashboard_query:{i}", "expr": e} for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_promtool_checks_the_alert_rules(promtool: str) -> None:
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_alert_unit_tests_pass(promtool: str) -> None:
    out = subprocess.run(
        [promtool, "test", "rules", "rules_test.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT / "deploy" / "prometheus",
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_alerts_cover_what_an_sre_must_hear_about() -> None:
    names = {str(r["alert"]) for r in alert_rules()}
    assert names == {
        "PerfschedExtenderErrors",
        "PerfschedExtenderSlow",
        "PerfschedOperatorNotLeading",
        "PerfschedJobsWaitingTooLong",
        "PerfschedPredictorErrorDrifting",
        "PerfschedQueueStarved",
        "PerfschedLearningStateNotStored",
    }
    tested = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules_test.yaml").read_text())
    fired = {a["alertname"] for t in tested["tests"] for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert fired == names, f"alerts without a firing unit test: {names - fired}"


def test_dashboard_has_the_panels_of_the_issue() -> None:
    titles = " | ".join(p["title"].lower() for p in json.loads(DASHBOARD.read_text())["panels"])
    for needle in [
        "latency p50 / p99 per verb",
        "filter rejections by reason",
        "gpus allocated vs capacity",
        "jobs by phase",
        "queue waiting time",
        "completion time",
        "predicted vs observed throughput",
        "resizes, preemptions and restarts",
        "deadlines met",
    ]:
        assert needle in titles, needle


def test_generated_files_are_current() -> None:
    assert DASHBOARD.read_text() == gen_dashboard.render(), "run python deploy/grafana/gen_dashboard.py"
    assert (ROOT / "docs" / "metrics.md").read_text() == gen_metrics_doc.render(), (
        "run deploy/gen_metrics_doc.py"
    )


def test_dashboard_is_well_formed_for_grafana() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]  # Grafana's grid is 24 wide
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"{p['title']} overlaps another panel"
        cells |= area
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert [t["refId"] for t in p["targets"]] == [chr(ord("A") + i) for i in range(len(p["targets"]))]
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
