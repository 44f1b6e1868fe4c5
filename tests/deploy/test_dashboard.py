"""The chart's Grafana dashboard (helm/binlog-relay/dashboards/binlog-relay.json, rendered as a
ConfigMap for Grafana's dashboard sidecar when dashboard.enabled): every panel's expression is
valid PromQL (``promtool check rules``, each expression as a recording rule) and names only
metrics that a real scrape of a running relay (with an archive, on moto's S3) exports, and that
relay.metrics.metrics_reference() (the README's table) lists."""

from __future__ import annotations

import json
import re
import subprocess

import yaml
from prometheus_client.parser import text_string_to_metric_families

from relay.sandbox.polling import wait_for
from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import start_relay
from tests.deploy.test_helm import CHART, Rendered, helm_template, values_file
from tests.support.metrics import Scrape, promtool_path
from tests.support.s3 import REGION

# Grafana's own variables, replaced by what Grafana would put there before PromQL sees them.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                     "$namespace": ".*", "$job": ".*", "$pod": ".*"}
METRIC = re.compile(r"\b(binlog_relay_[a-z0-9_]+)\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
ARCHIVE_PANELS = ("Archive store up", "Archive lag (files)", "Archive lag (bytes)", "Archive uploads per second",
                  "Archive compression ratio", "Archive errors", "Served from the archive per second",
                  "Clock against the archive's store")


def _dashboard_configmaps(helm_path: str, tmp_path_factory, values: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    result = helm_template(helm_path, values_file(tmp_path_factory, values))
    assert result.returncode == 0, result.stderr
    rendered = Rendered("dashboard", values, result.stdout)
    return [doc for doc in rendered.all("ConfigMap") if doc["metadata"].get("labels", {}).get("grafana_dashboard")]


def _expressions(dashboard: dict) -> list[tuple[str, str]]:
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"panel {panel['title']!r}: a Grafana variable the test does not know: {expr}"
            found.append((panel["title"], expr))
    return found


def test_the_dashboard_is_off_by_default_and_labelled_for_the_sidecar_when_on(helm, tmp_path_factory):
    base = {"config": {"upstream": {"host": "db"}}}
    assert _dashboard_configmaps(helm, tmp_path_factory, base) == []
    maps = _dashboard_configmaps(helm, tmp_path_factory, {**base, "dashboard": {"enabled": True}})
    assert len(maps) == 1 and maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "binlog-relay.json").read_text())
    assert json.loads(maps[0]["data"]["binlog-relay.json"]) == shipped


def test_every_panel_names_only_metrics_of_the_reference():
    """Without a relay: the names against metrics_reference() (a histogram by its _bucket/_sum/_count)."""
    from relay.metrics import metrics_reference

    reference = set(re.findall(r"`(binlog_relay_[a-z0-9_]+)`", metrics_reference()))
    dashboard = json.loads((CHART / "dashboards" / "binlog-relay.json").read_text())
    panels = {title: METRIC.findall(expr) for title, expr in _expressions(dashboard)}
    for title in ARCHIVE_PANELS:
        assert all(name.startswith("binlog_relay_archive_") for name in panels[title]), title
    for title, names in panels.items():
        missing = [name for name in names if name not in reference
                   and re.sub(r"_(bucket|sum|count)$", "", name) not in reference]
        assert not missing, f"panel {title!r} names metrics metrics_reference() does not list: {missing}"


def test_every_panel_is_valid_promql_and_names_only_metrics_the_relay_exports(mariadb_factory, s3_server, tmp_path):
    dashboard = json.loads((CHART / "dashboards" / "binlog-relay.json").read_text())
    expressions = _expressions(dashboard)
    titles = {title for title, _ in expressions}
    for topic in ("Upstream connected", "Lag behind the primary", "Reconnects and primary switches",
                  "Ingest bytes per second", "Ingest events per second", "fsync latency", "Replica lag (seconds)",
                  "Filtered event groups", "Stored binlog", *ARCHIVE_PANELS):
        assert topic in titles, f"no panel {topic!r}"

    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{n}", "expr": expr} for n, (_, expr) in enumerate(expressions)]}]}
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules))
    checked = subprocess.run([promtool_path(), "check", "rules", str(rules_file)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    primary = mariadb_factory(server_id=1)
    port = free_port()
    key_id, secret = s3_server.credential_files()
    archive = {"url": f"s3://{s3_server.bucket}/relay", "endpoint_url": s3_server.endpoint, "region": REGION,
               "access_key_id_file": str(key_id), "secret_access_key_file": str(secret)}
    relay = start_relay(tmp_path / "relay", primary.port, metrics_port=port, archive=archive)
    try:
        primary.sql("CREATE DATABASE d")
        primary.sql("CREATE TABLE d.t (id INT PRIMARY KEY)")
        primary.sql("INSERT INTO d.t VALUES (1)")
        primary.sql("FLUSH BINARY LOGS")  # a closed file for the archive: its upload counters move
        scrape = wait_for(lambda: (s := Scrape.fetch(port)).value("binlog_relay_upstream_connected") == 1
                          and (s.value("binlog_relay_archive_uploaded_files_total") or 0) >= 1 and s,
                          60, "the relay never connected to its primary or never archived a file")
    finally:
        relay.stop()
    exported = set()
    for family in text_string_to_metric_families(scrape.text):  # families with no sample yet count too
        exported.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        exported.update(sample.name for sample in family.samples)
    for title, expr in expressions:
        names = METRIC.findall(expr)
        assert names, f"panel {title!r} reads no relay metric: {expr}"
        missing = [name for name in names if name not in exported]
        assert not missing, f"panel {title!r} names metrics the relay does not export: {missing}"
