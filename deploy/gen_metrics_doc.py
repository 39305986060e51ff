"""Generate docs/metrics.md, the metrics reference, from the registry in ``scheduler/metrics.py``.

Every metric registered on ``scheduler.metrics.REGISTRY`` gets a row (name as scraped, type, labels,
help text); the dashboards and alerts that use it are listed too. tests/deploy/test_observability.py
fails when the committed file differs from this script's output.
Run: ``$VENV/bin/python deploy/gen_metrics_doc.py [--check]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "metrics.md"
RULES = ROOT / "helm" / "perfsched" / "files" / "perfsched-rules.yaml"
DASHBOARD = ROOT / "helm" / "perfsched" / "files" / "perfsched-dashboard.json"

SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "enum": ("",),
}


def registry_metrics() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(family name, type, label names, help) of every metric on ``scheduler.metrics.REGISTRY``."""
    sys.path.insert(0, str(ROOT))
    from scheduler.metrics import REGISTRY

    found = []
    # prometheus_client keeps the registered collectors here; each metric object knows its labels.
    for collector in list(REGISTRY._collector_to_names):
        labels = tuple(getattr(collector, "_labelnames", ()))
        for family in collector.describe() if hasattr(collector, "describe") else collector.collect():
            found.append((family.name, family.type, labels, family.documentation))
    return sorted(set(found))


def series_names(family: str, kind: str) -> list[str]:
    """The sample names a scrape shows for a family (counter ``x`` is scraped as ``x_total``)."""
    return [family + s for s in SERIES_SUFFIXES.get(kind, ("",))]


def used_in() -> dict[str, list[str]]:
    text_rules = RULES.read_text()
    text_dash = DASHBOARD.read_text()
    uses: dict[str, list[str]] = {}
    for label, text in (("alerts", text_rules), ("dashboard", text_dash)):
        for name in set(re.findall(r"\bperfsched_[a-zA-Z0-9_]+", text)):
            uses.setdefault(name, []).append(label)
    return uses


def render() -> str:
    uses = used_in()
    lines = [
        "# perfsched metrics reference",
        "",
        "Generated from `scheduler/metrics.py` by `deploy/gen_metrics_doc.py`; do not edit by hand",
        "(`tests/deploy/test_observability.py` checks it is current).",
        "",
        "The extender serves `/metrics` on its API port (8888 by default), the operator on its metrics port",
        "(9090 by default); the Helm chart's ServiceMonitor scrapes both. The Grafana dashboard",
        "(`helm/perfsched/files/perfsched-dashboard.json`) and the alerts",
        "(`helm/perfsched/files/perfsched-rules.yaml`) use only the metrics below.",
        "",
        "| metric (as scraped) | type | labels | used by | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for family, kind, labels, doc in registry_metrics():
        series = series_names(family, kind)
        users = sorted({u for s in series for u in uses.get(s, [])})
        shown = f"`{family}_total`" if kind == "counter" else f"`{family}`"
        if kind == "histogram":
            shown += " (`_bucket`, `_sum`, `_count`)"
        lines.append(
            f"| {shown} | {kind} | {', '.join(f'`{x}`' for x in labels) or '-'} | "
            f"{', '.join(users) or '-'} | {doc.replace('|', '/').replace(chr(10), ' ')} |"
        )
    lines += [
        "",
        "## Alerts",
        "",
        "See `helm/perfsched/files/perfsched-rules.yaml`"
        " (unit-tested by `deploy/prometheus/rules_test.yaml`):",
        "",
    ]
    import yaml

    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            lines.append(
                f"- **{rule['alert']}** ({rule['labels']['severity']}, for {rule['for']}): "
                f"{rule['annotations']['summary']}."
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/metrics.md is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"{OUT} is out of date: run deploy/gen_metrics_doc.py")
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
