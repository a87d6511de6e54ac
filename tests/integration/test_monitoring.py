"""The dashboard and the alerts (charts/nimbix-burst/monitoring/): promtool, from Debian's prometheus
package, checks the rule file and runs its unit tests (one test group per alert); and every metric
the dashboard and the rules query is one the webhook and the controller export, read from the
exposition of their real Metrics objects."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.metrics import Metrics as ControllerMetrics
from devplatform import debtools, helmchart
from gateway.metrics import GatewayMetrics
from webhook.cache import ClusterCache
from webhook.metrics import Metrics as WebhookMetrics
from webhook.sync import CacheSync

MONITORING_DIR = helmchart.CHART_DIR / "monitoring"
ALERTS = MONITORING_DIR / "alerts.yaml"
ALERT_TESTS = MONITORING_DIR / "alerts_test.yaml"
DASHBOARD = MONITORING_DIR / "dashboard.json"
# The alerts the product promises (docs/monitoring.md has a runbook line for each).
EXPECTED_ALERTS = {
    "NimbixBurstWebhookUnavailable",
    "NimbixBurstWebhookNoLeader",
    "NimbixBurstControllerNoLeader",
    "NimbixBurstReviewsWithoutLocalPromise",
    "NimbixBurstOrphansTerminated",
    "NimbixBurstUnaccountedJobsStopped",
    "NimbixBurstGatewayRefusals",
    "NimbixBurstGatewayUpstreamErrors",
    "NimbixBurstNamespaceAtBudget",
    "NimbixBurstJarviceErrors",
    "NimbixBurstControllerUnavailable",
    "NimbixBurstReaperOff",
    "NimbixBurstClusterIdentityUnknown",
    "NimbixBurstLegacyJobsBilling",
    "NimbixBurstUnattributedJobsBilling",
    "NimbixBurstHourlyCostNearCap",
    "NimbixBurstHourlyCostAtCap",
    "NimbixBurstMonthlyCostNearCap",
    "NimbixBurstMonthlyCostAtCap",
}
# Series Prometheus itself adds to every scrape, not exported by the programs.
SCRAPE_SERIES = {"up"}
METRIC_NAME = re.compile(r"\b(nimbix_burst_[a-z_]+|up)\b")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}


@pytest.fixture(scope="module")
def promtool() -> Path:
    return debtools.ensure_tool("promtool")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)


def test_promtool_accepts_the_rule_file(promtool: Path) -> None:
    result = _run([str(promtool), "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 19 rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass(promtool: Path) -> None:
    result = _run([str(promtool), "test", "rules", str(ALERT_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_can_fail(promtool: Path, tmp_path: Path) -> None:
    """The same tests against a rule file whose leader alert never fires: promtool must say so."""
    broken = ALERTS.read_text().replace("max(nimbix_burst_leader) == 0", "max(nimbix_burst_leader) == 2")
    (tmp_path / "alerts.yaml").write_text(broken)
    (tmp_path / "alerts_test.yaml").write_text(ALERT_TESTS.read_text())
    result = _run([str(promtool), "test", "rules", str(tmp_path / "alerts_test.yaml")])
    assert result.returncode != 0
    assert "NimbixBurstWebhookNoLeader" in result.stdout + result.stderr


def test_every_promised_alert_exists_and_has_a_unit_test() -> None:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == EXPECTED_ALERTS
    tested = {
        case["alertname"]
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == EXPECTED_ALERTS
    for rule in rules:
        assert rule["annotations"]["runbook"] == f"docs/monitoring.md#{rule['alert'].lower()}"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}


def _exported_names(registry_text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(registry_text):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


class _Router:
    forwarded = forward_failures = leaderless = 0

    def leading(self) -> bool:
        return True


class _Elector:
    started_leading = stepped_down = round_failures = release_failures = 0


def _webhook_exposition() -> str:
    clock: Callable[[], float] = lambda: 0.0  # noqa: E731
    cache = ClusterCache(gpu_resources=("nvidia.com/gpu",), clock=clock, reservation_ttl=120)
    metrics = WebhookMetrics(cache, CacheSync(cache, clock=clock), clock)
    metrics.watch_election(router=_Router(), elector=_Elector())
    return generate_latest(metrics.registry).decode()


def _controller_exposition() -> str:
    return generate_latest(ControllerMetrics(is_leader=lambda: True).registry).decode()


def _gateway_exposition() -> str:
    return generate_latest(GatewayMetrics().registry).decode()


def _queried_names() -> dict[str, set[str]]:
    """Metric name -> where it is queried (alert names, dashboard panel titles)."""
    where: dict[str, set[str]] = {}
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            for name in METRIC_NAME.findall(rule["expr"]):
                where.setdefault(name, set()).add(f"alert {rule['alert']}")
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for name in METRIC_NAME.findall(target["expr"]):
                where.setdefault(name, set()).add(f"panel {panel['title']!r}")
    return where


def test_every_metric_the_dashboard_and_the_alerts_query_is_exported() -> None:
    exported = (
        _exported_names(_webhook_exposition())
        | _exported_names(_controller_exposition())
        | _exported_names(_gateway_exposition())
        | SCRAPE_SERIES
    )
    queried = _queried_names()
    missing = {name: sorted(where) for name, where in queried.items() if name not in exported}
    assert missing == {}
    assert len(queried) > 20  # the parse found the queries (a broken regex would find nothing)


def test_the_dashboard_shows_every_metric_the_programs_export() -> None:
    exported = (
        _exported_names(_webhook_exposition())
        | _exported_names(_controller_exposition())
        | _exported_names(_gateway_exposition())
    )
    shown = set(_queried_names())
    # Counters' _created and a histogram's _sum/_count are read through their family's main series.
    families = {name for name in exported if not name.endswith(("_created", "_sum", "_count"))}
    assert sorted(families - shown) == []


def test_the_dashboard_is_a_grafana_dashboard_with_unique_panel_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "nimbix-burst"
    assert {v["name"] for v in dashboard["templating"]["list"]} == {
        "datasource",
        "webhook_job",
        "controller_job",
        "gateway_job",
    }
