"""The Grafana dashboard's queries name only metrics the server really exports, and its own variables."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric

from envhub.server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/k8s/base/monitoring/envhub-dashboard.json"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every scrape target."""
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created")}
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def exported_series() -> set[str]:
    """Every series name the server's registry exposes (counters as _total, histograms as _bucket...)."""
    families: list[Metric] = list(Metrics().registry.collect())
    assert families, "the server registry exports nothing"
    return {family.name + suffix for family in families for suffix in SUFFIXES[family.type]}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def expressions() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def test_every_queried_metric_is_exported_by_the_server() -> None:
    exported = exported_series()
    named = {name for expr in expressions() for name in SELECTOR.findall(expr)}
    assert named - PROMETHEUS_OWN, "the dashboard queries no envhub metric"
    assert named <= exported | PROMETHEUS_OWN, f"not exported: {sorted(named - exported - PROMETHEUS_OWN)}"


def test_every_server_metric_has_a_panel() -> None:
    named = " ".join(expressions())
    families = {family.name for family in Metrics().registry.collect()}
    assert {family for family in families if family not in named} == set()


def test_panels_are_complete_and_use_only_defined_variables() -> None:
    board = dashboard()
    defined = {variable["name"] for variable in board["templating"]["list"]}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in board["panels"]:
        assert panel["title"] and panel["targets"] and set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["datasource"]["uid"] == "${datasource}"
        text = json.dumps(panel["targets"])
        used = {a or b for a, b in VARIABLE.findall(text)} - {"__rate_interval", "__range"}
        assert used <= defined, f"panel {panel['title']!r} uses undefined {used - defined}"


def test_rpc_panels_show_an_error_ratio_and_p99_latency_by_method() -> None:
    exprs = expressions()
    ratios = [e for e in exprs if e.count("envhub_rpc_requests_total") == 2 and 'code!="OK"' in e and " / " in e]
    p99 = [e for e in exprs if e.startswith("histogram_quantile(0.99") and "envhub_rpc_latency_seconds_bucket" in e]
    assert ratios and all("by (method)" in e for e in ratios)
    assert p99 and all("by (le, method)" in e for e in p99)
