"""The capacity calendar: GPUs per host, grouped by model, over time; leases
as bars, a line for now, and the waiting leases in their planned slots."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from flask import g, render_template, request, url_for

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.dashboard import bp, svg
from gpu_tenancy.dashboard.login import api, is_admin
from gpu_tenancy.dashboard.tenant import newest_leases
from gpu_tenancy.timeutil import parse_time, rfc3339

HOUR = 3600
WIDTH, LABEL_W, RIGHT = 1100, 170, 10
GPU_PX, ROW_GAP, HEADER_H, AXIS_H, WAIT_ROW = 9, 6, 22, 28, 15
COLOURS = {"scheduled": "#4a90d9", "provisioning": "#e8a33d", "active": "#3c9a5f", "ending": "#8f9ba8"}
HATCH = ('<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#c33" stroke-width="1.5"/></pattern>')


@dataclass
class Bar:
    lease: dict
    start: int
    end: int
    gpus: int
    offset: int = 0   # GPUs below it in its row


def first_fit(bars: list[Bar]) -> int:
    """Stack bars in a row so that bars overlapping in time never overlap in
    GPUs: each takes the lowest offset free over its whole span. Returns the height in GPUs."""
    placed: list[Bar] = []
    for bar in sorted(bars, key=lambda b: (b.start, -b.gpus)):
        offset = 0
        for other in sorted((p for p in placed if p.start < bar.end and bar.start < p.end), key=lambda p: p.offset):
            if other.offset < offset + bar.gpus and offset < other.offset + other.gpus:
                offset = other.offset + other.gpus
        bar.offset = offset
        placed.append(bar)
    return max((b.offset + b.gpus for b in placed), default=0)


def draw(hosts: list[dict], leases: list[dict], start: int, end: int, now: int, own_project: str,
         admin: bool) -> object:
    def x_of(t: int) -> float:
        return LABEL_W + (min(max(t, start), end) - start) / (end - start) * (WIDTH - LABEL_W - RIGHT)

    parts: list[str] = []
    bars_by_host: dict[str, list[Bar]] = defaultdict(list)
    waiting_by_model: dict[str, list[Bar]] = defaultdict(list)
    unplanned: dict[str, list[dict]] = defaultdict(list)
    for lease in leases:
        if lease["status"] in ("requested", "queued"):
            eta = (lease.get("queue") or {}).get("eta")
            if eta:
                t = parse_time(eta)
                waiting_by_model[lease["gpu_model"]].append(
                    Bar(lease, t, t + lease["duration"], lease["gpus_per_instance"] * lease["instances"]))
            else:
                unplanned[lease["gpu_model"]].append(lease)
            continue
        for a in lease["allocations"]:
            bars_by_host[a["host"]].append(Bar(lease, parse_time(a["start"]), parse_time(a["end"]), a["gpus"]))
    y = AXIS_H
    by_model: dict[str, list[dict]] = defaultdict(list)
    for host in hosts:
        by_model[host["gpu_model"]].append(host)
    for model in sorted(by_model):
        group = by_model[model]
        parts.append(svg.text(6, y + 15, f"{model}: {sum(h['gpus'] for h in group)} GPUs on {len(group)} hosts",
                              class_="model"))
        y += HEADER_H
        for host in group:
            height = host["gpus"] * GPU_PX
            parts.append(svg.rect(LABEL_W, y, WIDTH - LABEL_W - RIGHT, height, fill="#f4f6f8", stroke="#d5dbe1"))
            if not host["in_service"]:
                parts.append(svg.rect(LABEL_W, y, WIDTH - LABEL_W - RIGHT, height, fill="url(#hatch)",
                                      title=f"{host['host']} takes no new leases (down, disabled or drained)"))
            parts.append(svg.text(6, y + min(height, 24) / 2 + 4, f"{host['host']} ({host['gpus']})", class_="host"))
            for frm, to, free in ((parse_time(s["from"]), parse_time(s["to"]), s["free"] + s.get("planned", 0))
                                  for s in host["free"]):   # waiting leases are drawn in their own lane
                used = host["gpus"] - free
                if used > 0:
                    parts.append(svg.rect(x_of(frm), y + height - used * GPU_PX, x_of(to) - x_of(frm), used * GPU_PX,
                                          fill="#cfd6de", title=f"{used} of {host['gpus']} GPUs held "
                                                                f"{rfc3339(frm)} to {rfc3339(to)}"))
            bars = bars_by_host.get(host["host"], [])
            first_fit(bars)
            for bar in bars:
                parts.append(lease_bar(bar, x_of, y + height - (bar.offset + bar.gpus) * GPU_PX, bar.gpus * GPU_PX,
                                       COLOURS.get(bar.lease["status"], "#999"), own_project, admin))
            y += height + ROW_GAP
        waiting = waiting_by_model.get(model, [])
        if waiting or unplanned.get(model):
            lanes = waiting_lanes(waiting)
            parts.append(svg.text(6, y + 11, f"waiting ({len(waiting) + len(unplanned.get(model, []))})",
                                  class_="host"))
            for bar in waiting:
                parts.append(lease_bar(bar, x_of, y + bar.offset * WAIT_ROW, WAIT_ROW - 3, None, own_project, admin))
            y += max(lanes, 1) * WAIT_ROW + ROW_GAP
        y += ROW_GAP
    axis(parts, start, end, x_of, y)
    x_now = x_of(now)
    parts.append(svg.line(x_now, AXIS_H - 6, x_now, y, stroke="#d0021b", stroke_width="2", class_="now"))
    parts.append(svg.text(x_now + 3, AXIS_H - 8, "now", fill="#d0021b", class_="axis"))
    return svg.document(WIDTH, y + 4, parts, "capacity calendar", HATCH)


def waiting_lanes(waiting: list[Bar]) -> int:
    """Waiting leases take one lane each where they overlap (their offset counts
    lanes, not GPUs); returns the number of lanes."""
    lanes = [Bar(b.lease, b.start, b.end, 1) for b in waiting]
    height = first_fit(lanes)
    for bar, lane in zip(waiting, lanes):
        bar.offset = lane.offset
    return height


def lease_bar(bar: Bar, x_of, y: float, height: float, colour: str | None, own_project: str, admin: bool) -> str:
    lease = bar.lease
    x, w = x_of(bar.start), max(x_of(bar.end) - x_of(bar.start), 2)
    queue = lease.get("queue") or {}
    title = (f"{lease['name']} ({lease['project_id']}): {lease['status']}, {bar.gpus} x {lease['gpu_model']}, "
             f"{rfc3339(bar.start)} to {rfc3339(bar.end)}"
             + (f", queue position {queue['position']}" if queue.get("position") else ""))
    style = {"fill": colour, "class_": "lease"} if colour else {"fill": "#fff", "stroke": "#4a90d9",
                                                               "stroke_dasharray": "4 2", "class_": "lease waiting"}
    shape = svg.rect(x, y + 1, w, height - 1, title=title, rx="2", **style)
    label = svg.text(x + 3, y + min(height, 14) - 2, lease["name"][: int(w / 6.5)],
                     class_="bar-label" + ("" if colour else " dark")) if w > 30 else ""
    part = shape + label
    if admin or lease["project_id"] == own_project:
        part = svg.link(url_for("dashboard.lease", lease_id=lease["id"]), part)
    return part


def axis(parts: list[str], start: int, end: int, x_of, bottom: float) -> None:
    step = 6 * HOUR if end - start <= 3 * 86400 else 24 * HOUR
    t = start - start % step + step
    while t < end:
        x = x_of(t)
        parts.append(svg.line(x, AXIS_H - 4, x, bottom, stroke="#e3e7eb"))
        if x + 70 < WIDTH:  # a label that would run off the edge is left out
            parts.append(svg.text(x + 2, AXIS_H - 12, rfc3339(t)[5:16].replace("T", " "), class_="axis"))
        t += step


@bp.get("/capacity")
def capacity():
    now = rt.now()
    try:
        days = min(max(int(request.args.get("days", 2)), 1), 14)
    except ValueError:
        days = 2
    start = now - now % HOUR - 6 * HOUR
    end = start + days * 86400
    client = api()
    body = client.get("/v1/capacity", start=rfc3339(start), end=rfc3339(end))["capacity"]
    statuses = ["requested", "queued", "scheduled", "provisioning", "active", "ending"]
    leases = newest_leases(client, statuses, all_projects="true" if is_admin() else None)
    chart = draw(body.get("calendar", []), leases, start, end, now, g.login.project_id, is_admin())
    return render_template("dashboard/capacity.html", chart=chart, models=body["gpu_models"], days=days,
                           start=rfc3339(start), end=rfc3339(end))
