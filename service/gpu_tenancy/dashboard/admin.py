"""Admin pages: quotas per project (edit), hosts, the owners' figures as
charts (each as CSV and JSON too), and exports of leases, events and usage."""
from __future__ import annotations

import csv
import io
import json
from typing import Iterable, Iterator
from urllib.parse import quote

from flask import Response, abort, g, redirect, render_template, request, stream_with_context, url_for
from oslo_context.context import RequestContext

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.csv_cells import safe_cell
from gpu_tenancy.dashboard import bp, charts
from gpu_tenancy.dashboard.api_client import ApiError
from gpu_tenancy.dashboard.formatting import span
from gpu_tenancy.dashboard.login import api, flash
from gpu_tenancy.engine import reports
from gpu_tenancy.timeutil import rfc3339

DAY = 86400
PERCENT = lambda v: f"{v * 100:.0f}%"  # noqa: E731
WAIT = lambda v: span(round(v)) or "0 s"  # noqa: E731
SHORT_DAY = lambda v: v[5:]  # noqa: E731
SHORT_HOUR = lambda v: v[5:13].replace("T", " ") + "h"  # noqa: E731

# figure: (title, what it shows, chart)
FIGURES = {
    "wait_by_day": ("Wait: P50 and P90 by day",
                    "From the requested start to the start, for leases given GPUs, by day of the requested start.",
                    lambda rows: charts.bars(rows, "day", [("p50_wait_seconds", "P50"), ("p90_wait_seconds", "P90")],
                                             WAIT, SHORT_DAY, seconds=True)),
    "on_time_share": ("Running within 10 minutes of the requested start",
                      "Share of leases active by their requested start + 10 min (owner cancellations before "
                      "then left out), by day.",
                      lambda rows: charts.lines(rows, "day", [("share", "on time")], PERCENT, SHORT_DAY, top=1)),
    "eta_kept": ("ETA and start-by kept",
                 "Of the leases that waited, the share that started no later than the ETA they were first "
                 "given + 10 min, and than the start-by told with it + 10 min, by day of the start.",
                 lambda rows: charts.lines(rows, "day", [("share", "ETA kept"), ("start_by_share", "start-by kept")],
                                           PERCENT, SHORT_DAY, top=1)),
    "eta_lateness": ("Lateness past the first ETA: P50 and P90 by day",
                     "How long past the ETA they were first given the leases that waited started (0: on time "
                     "or early), by day of the start.",
                     lambda rows: charts.bars(rows, "day", [("p50_lateness_seconds", "P50"),
                                                            ("p90_lateness_seconds", "P90")], WAIT, SHORT_DAY,
                                                 seconds=True)),
    "first_try_success": ("First-try start success",
                          "Share of first provisioning attempts that went straight to active, by day.",
                          lambda rows: charts.lines(rows, "day", [("share", "first try")], PERCENT, SHORT_DAY,
                                                    top=1)),
    "failures_by_class": ("Failures by class", "Failed leases per failure class.",
                          lambda rows: charts.bars(rows, "failure_class", [("leases", "failed leases")])),
    "hourly_gpu_use": ("Hourly GPU use", "GPUs held on average in each hour, against all GPUs of the cloud.",
                       lambda rows: charts.lines(rows, "hour", [("gpus_in_use", "in use"), ("gpus", "GPUs")],
                                                 label=SHORT_HOUR)),
    "idle_fragmentation": ("Idle fragmentation (now)",
                           "Free GPUs, and those stranded on hosts with fewer free than the most common "
                           "waiting shape needs, per model.",
                           lambda rows: charts.bars(rows, "gpu_model", [("free_gpus", "free"),
                                                                        ("stranded_gpus", "stranded")])),
    "cancel_ratio": ("Cancel ratio", "Share of the leases created each day that were cancelled.",
                     lambda rows: charts.lines(rows, "day", [("ratio", "cancelled")], PERCENT, SHORT_DAY, top=1)),
    "gpu_hours_used": ("GPU-hours allocated and used",
                       "Per project and GPU model: GPU-hours held by leases, those their guest agents reported "
                       "on, and those used (each reported GPU counted by its utilisation).",
                       lambda rows: charts.bars([{**r, "of": f"{r['project_id']} {r['gpu_model']}"} for r in rows],
                                                "of", [("allocated_gpu_hours", "allocated"),
                                                       ("measured_gpu_hours", "reported"),
                                                       ("used_gpu_hours", "used")])),
    "idle_leases": ("Idle leases (now)",
                    "Active leases whose every GPU has been idle for at least the configured idle minutes, as "
                    "their agents report; longest idle first.",
                    lambda rows: charts.bars([{**r, "of": r["lease_id"][:8]} for r in rows], "of",
                                             [("idle_minutes", "idle minutes"), ("gpus", "GPUs")])),
}


def require_admin() -> None:
    """The cloud admin only. The roles kept with the login are those Keystone gave when it
    began: the API, on the login's token as it is now, says whether it may still list every
    project's leases (what these pages show; an admin role removed since opens nothing), and
    that the login is still valid (a revoked token logs out)."""
    login = g.login
    context = RequestContext(user_id=login.user_id, project_id=login.project_id, roles=login.roles)
    if not rt.runtime().enforcer.enforce("admin", {"project_id": login.project_id}, context.to_policy_values()):
        abort(403, "these pages are for cloud admins")
    reply = api().call("GET", "/v1/leases", query={"all_projects": "true", "limit": "1"})
    if reply.status == 403:
        abort(403, "these pages are for cloud admins")
    if not reply.ok:
        raise ApiError(reply)


def window() -> tuple[int, int, int]:
    try:
        days = min(max(int(request.args.get("days", 14)), 1), 90)
    except ValueError:
        abort(400, "days is a whole number from 1 to 90")
    now = rt.now()
    end = now - now % 3600 + 3600
    return end - days * DAY, end, days


def download(name: str, rows: Iterable[dict], form: str, meta: dict):
    """The rows as a file, written as they come: an export's are read a page at a time
    (reports.export), and never all held here either."""
    if form == "json":
        body: Iterator[str] = json_lines(meta, rows)
    else:
        body = csv_lines(rows)
    return Response(stream_with_context(body), mimetype="application/json" if form == "json" else "text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{name}.{form}"'})


def json_lines(meta: dict, rows: Iterable[dict]) -> Iterator[str]:
    yield json.dumps(meta)[:-1] + ', "rows": ['
    for i, row in enumerate(rows):
        yield ("," if i else "") + "\n " + json.dumps(row)
    yield "\n]}"


def csv_lines(rows: Iterable[dict]) -> Iterator[str]:
    """A header row (the first row's keys; none for no rows), then a line per row."""
    out = io.StringIO()
    writer = None
    for row in rows:
        if writer is None:
            writer = csv.DictWriter(out, fieldnames=list(row))
            writer.writeheader()
        writer.writerow({k: safe_cell(v) for k, v in row.items()})
        yield out.getvalue()
        out.seek(0)
        out.truncate()


@bp.get("/admin/figures")
def figures():
    require_admin()
    start, end, days = window()
    with rt.transaction() as session:
        data = reports.all_figures(session, start, end, rt.now(), rt.planner_settings().release_floor,
                                   rt.runtime().config.idle_minutes)
    panels = [{"name": name, "title": title, "about": about, "rows": data[name],
               "chart": chart(data[name]) if data[name] else None}
              for name, (title, about, chart) in FIGURES.items()]
    return render_template("dashboard/figures.html", panels=panels, days=days, start=rfc3339(start),
                           end=rfc3339(end), exports=reports.EXPORTS)


@bp.get("/admin/figures/<name>.<form>")
def figure_download(name: str, form: str):
    require_admin()
    if name not in FIGURES or form not in ("csv", "json"):
        abort(404, "no such figure or format")
    start, end, days = window()
    with rt.transaction() as session:
        rows = reports.all_figures(session, start, end, rt.now(), rt.planner_settings().release_floor,
                                   rt.runtime().config.idle_minutes)[name]
    return download(name, rows, form, {"figure": name, "title": FIGURES[name][0], "start": rfc3339(start),
                                       "end": rfc3339(end)})


@bp.get("/admin/export/<what>.<form>")
def export(what: str, form: str):
    require_admin()
    if what not in reports.EXPORTS or form not in ("csv", "json"):
        abort(404, "no such export or format")
    start, end, _ = window()
    rows = reports.export(rt.transaction, what, start, end, rt.now())   # read as the download is sent
    return download(what, rows, form, {"export": what, "start": rfc3339(start), "end": rfc3339(end)})


@bp.get("/admin/hosts")
def hosts():
    return render_template("dashboard/hosts.html", hosts=api().get("/v1/hosts")["hosts"])


@bp.post("/admin/hosts/<name>")
def drain(name: str):
    drained = request.form.get("drained") == "true"
    if drained and request.form.get("confirmed") != "yes":   # asked first, on a page of its own (no script)
        return render_template(
            "dashboard/confirm.html", title=f"Drain {name}?",
            consequence=f"{name} takes no new leases, and the leases planned there, and the resume slots "
                        "parked leases hold there, move to other hosts (they may start or resume later); "
                        "running VMs stay until their leases end.",
            action=url_for("dashboard.drain", name=name), fields={"drained": "true"},
            confirm_label=f"Yes, drain {name}", back=url_for("dashboard.hosts"), back_label="No, keep it")
    reply = api().call("PATCH", "/v1/hosts/" + quote(name, safe=""), body={"drained": drained})   # (as quotas)
    if reply.ok:
        flash(f"{name} is drained: it takes no new leases, and those planned there move to other hosts" if drained else f"{name} takes new leases again", "ok")
    else:
        flash(f"{name} unchanged: {reply.error}", "error")
    return redirect(url_for("dashboard.hosts"))


def quota_limits(form) -> dict:
    """One model's limits from the form; ValueError in words."""
    try:
        limits: dict[str, float | None] = {"gpus": int(form.get("gpus", "")), "borrow_gpus": int(form.get("borrow_gpus") or 0),
                  "weight": float(form.get("weight") or 1)}
        hours = form.get("max_hours", "").strip()
        limits["max_duration"] = int(float(hours) * 3600) if hours else None
    except (ValueError, OverflowError):   # OverflowError: hours "inf" or "1e400", no whole number of seconds
        raise ValueError("GPUs and borrowable GPUs are whole numbers; weight and longest lease (hours) are "
                         "numbers") from None
    return limits


@bp.route("/admin/quotas", methods=["GET", "POST"])
def quotas():
    require_admin()
    client = api()
    if request.method == "POST":
        project, model = request.form.get("project_id", "").strip(), request.form.get("gpu_model", "").strip()
        try:
            body = {"quota": {"gpu_models": {model: quota_limits(request.form)}}}
        except ValueError as exc:
            flash(f"not saved: {exc}", "error")
        else:
            # quoted whole, as lease ids are (tenant.lease_path): a '?' or '#' typed in the id stays
            # part of it (the API judges it whole) instead of setting the quota of the id before it
            reply = client.call("PUT", "/v1/quotas/" + quote(project or "-", safe=""), body=body)
            flash(f"saved: {project} {model}" if reply.ok else f"not saved: {reply.error}",
                  "ok" if reply.ok else "error")
        return redirect(url_for("dashboard.quotas"))
    listed = client.get("/v1/quotas")["quotas"]
    models = sorted(client.get("/v1/capacity")["capacity"]["gpu_models"])
    return render_template("dashboard/quotas.html", quotas=listed, models=models)
