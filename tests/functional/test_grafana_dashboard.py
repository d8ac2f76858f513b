"""The Grafana dashboard (docs/grafana/gpu-tenancy.json) loads and shows real figures:
it is checked against the dashboard model Grafana reads (the fields and types of
Grafana's dashboard schema, version 39, that a provisioned dashboard needs), its panels
do not overlap on the 24-column grid, every variable it uses is defined, and every
metric its queries name is one /metrics really exports."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from prometheus_client.parser import text_string_to_metric_families

from gpu_tenancy.domain.failures import FailureClass as F
from tests.conftest import headers

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gpu-tenancy.json"
DATASOURCE = {"type": "object", "required": ["type", "uid"],
              "properties": {"type": {"const": "prometheus"}, "uid": {"type": "string"}}}
TARGET = {"type": "object", "required": ["refId", "expr"], "properties": {
    "refId": {"type": "string", "pattern": "^[A-Z]$"}, "expr": {"type": "string", "minLength": 1},
    "legendFormat": {"type": "string"}, "datasource": DATASOURCE}}
PANEL = {"type": "object", "required": ["id", "type", "title", "gridPos", "targets", "datasource"], "properties": {
    "id": {"type": "integer", "minimum": 1},
    "type": {"enum": ["timeseries", "stat", "bargauge", "gauge", "table", "barchart", "heatmap"]},
    "title": {"type": "string", "minLength": 1}, "description": {"type": "string"},
    "datasource": DATASOURCE,
    "gridPos": {"type": "object", "required": ["h", "w", "x", "y"], "additionalProperties": False, "properties": {
        "h": {"type": "integer", "minimum": 1}, "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23}, "y": {"type": "integer", "minimum": 0}}},
    "targets": {"type": "array", "minItems": 1, "items": TARGET},
    "fieldConfig": {"type": "object", "required": ["defaults", "overrides"]},
    "options": {"type": "object"}}}
SCHEMA = {"type": "object", "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
          "properties": {
              "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"}, "title": {"type": "string"},
              "schemaVersion": {"type": "integer", "minimum": 36}, "version": {"type": "integer"},
              "tags": {"type": "array", "items": {"type": "string"}},
              "time": {"type": "object", "required": ["from", "to"]},
              "refresh": {"type": "string"}, "timezone": {"type": "string"},
              "templating": {"type": "object", "required": ["list"], "properties": {"list": {"type": "array", "items": {
                  "type": "object", "required": ["name", "type"],
                  "properties": {"name": {"type": "string"},
                                 "type": {"enum": ["datasource", "query", "custom", "constant", "interval"]}}}}}},
              "panels": {"type": "array", "minItems": 1, "items": PANEL}}}
METRIC = re.compile(r"\b(gpu_tenancy_[a-z0-9_]+)\b")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_dashboard_is_a_grafana_dashboard():
    board = dashboard()
    jsonschema.validate(board, SCHEMA)
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    defined = {v["name"] for v in board["templating"]["list"]} | {"__range", "__interval", "__all"}
    used = set(re.findall(r"\$\{?([a-zA-Z_]+)", json.dumps(panels)))
    assert used <= defined, used - defined
    # what the issue asks the dashboard to show
    text = json.dumps(panels)
    for needed in ("histogram_quantile(0.5, sum by (le, gpu_model) (gpu_tenancy_admission_wait_time_seconds_bucket",
                   "histogram_quantile(0.9, sum by (le, gpu_model) (gpu_tenancy_admission_wait_time_seconds_bucket",
                   "sum by (reason) (gpu_tenancy_pending_leases", "gpu_tenancy_eta_kept_ratio", "gpu_tenancy_start_by_kept_ratio",
                   "gpu_tenancy_gpus_in_use", "sum by (failure_class) (increase(gpu_tenancy_lease_failures_total"):
        assert needed in text, needed


def exported(client) -> dict[str, set[str]]:
    """Every sample name /metrics exports, with its label names."""
    reply = client.get("/metrics", headers=headers("ops", "admin"))
    assert reply.status_code == 200
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(reply.get_data(as_text=True)):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_metric_the_dashboard_queries_is_exported(client, cloud, engine_tick):
    """Leases running, one waiting, one failed, then the waiting one started (past its ETA or
    not): every family has samples in one of the two scrapes."""
    for shape, instances in (("a100.x8", 2), ("a100.x8", 1), ("a100.x8", 1)):   # the third waits for quota
        reply = client.post("/v1/leases", json={"shape": shape, "instances": instances, "duration": "PT1H"},
                            headers=headers())
        assert reply.status_code == 201, reply.get_json()
    cloud.inject_failure("server_error", F.IMAGE)
    client.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT1H"}, headers=headers("nlp-lab"))
    engine_tick()
    engine_tick(advance=60)
    names = exported(client)
    for _ in range(3):
        engine_tick(advance=1800)
    for name, labels in exported(client).items():
        names.setdefault(name, set()).update(labels)
    queried = {}
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            for metric in METRIC.findall(target["expr"]):
                queried.setdefault(metric, []).append(target["expr"])
    variables = [v["definition"] for v in dashboard()["templating"]["list"] if v.get("definition")]
    for expr in variables:
        for metric in METRIC.findall(expr):
            queried.setdefault(metric, []).append(expr)
    assert queried
    missing = {metric: exprs for metric, exprs in queried.items() if metric not in names}
    assert not missing, f"queried but not in /metrics: {missing}"
    # the labels each query groups by are those of its metrics; those it filters on, the metric's own
    for metric, exprs in queried.items():
        for expr in exprs:
            labels = set().union(*(names[m] for m in METRIC.findall(expr))) | {"le"}
            for clause in re.findall(r"by \(([^)]*)\)", expr):
                assert {label.strip() for label in clause.split(",")} <= labels, (clause, expr)
            for clause in re.findall(metric + r"\{([^}]*)\}", expr):
                assert set(re.findall(r"([a-z_]+)\s*=", clause)) <= names[metric], (clause, expr)


# Keys Grafana reads that its dashboard model leaves out: `__inputs`, the import form's
# data source question (read by Grafana's import page, not stored), and a query
# variable's `definition`, the query as its editor shows it.
OUTSIDE_THE_MODEL = {"/__inputs", "/templating/list[]/definition"}


def unknown_keys(ours, kept, path=""):
    """The keys of `ours` that Grafana's model dropped when it read the dashboard."""
    if isinstance(ours, dict):
        for key, value in ours.items():
            if not isinstance(kept, dict) or key not in kept:
                yield f"{path}/{key}"
            else:
                yield from unknown_keys(value, kept[key], f"{path}/{key}")
    elif isinstance(ours, list) and isinstance(kept, list):
        for a, b in zip(ours, kept):
            yield from unknown_keys(a, b, f"{path}[]")


def as_plain(model) -> dict:
    return json.loads(json.dumps(model.to_json(), default=lambda o: o.to_json() if hasattr(o, "to_json") else o))


def test_grafanas_own_dashboard_model_reads_every_key():
    """Read by the dashboard model Grafana generates from its schema (grafana-foundation-sdk,
    Grafana 11.6): a misspelt or misplaced key would be dropped, and is reported."""
    from grafana_foundation_sdk.models.dashboard import Dashboard

    board = dashboard()
    kept = as_plain(Dashboard.from_json(board))
    assert set(unknown_keys(board, kept)) == OUTSIDE_THE_MODEL
    assert len(kept["panels"]) == len(board["panels"])
    # the check sees a misplaced key
    misplaced = {**board, "panles": board["panels"]}
    assert "/panles" in set(unknown_keys(misplaced, as_plain(Dashboard.from_json(misplaced))))
