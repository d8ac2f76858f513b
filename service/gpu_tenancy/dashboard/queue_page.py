"""Everyone's queue (Slurm's squeue) and the fair-share standing (sshare), as the API
answers them: every waiting lease in planned order per GPU model (a page at a time), and per project and
model the quota, use and rank. Other projects come unnamed unless the API names them."""
from __future__ import annotations

from collections import defaultdict
from urllib.parse import parse_qs, urlsplit

from flask import render_template, request

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.dashboard import bp
from gpu_tenancy.dashboard.login import api
from gpu_tenancy.timeutil import spoken_duration


def gpu_models(client) -> list[str]:
    """The cloud's GPU models, for the filter."""
    return sorted(client.get("/v1/capacity")["capacity"]["gpu_models"])


def by_model(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        out[row["gpu_model"]].append(row)
    return dict(sorted(out.items()))


def next_marker(body: dict) -> str | None:
    """The marker of the page after this one of the API's queue, if another follows."""
    for link in body.get("leases_links", []):
        if link["rel"] == "next":
            return parse_qs(urlsplit(link["href"]).query)["marker"][0]
    return None


@bp.get("/queue")
def queue():
    """A page of the queue, the API's default page (100, at most the operator's max_page_size),
    with a link to the next while more wait."""
    client = api()
    model = request.args.get("gpu_model") or None
    marker = request.args.get("marker") or None
    body = client.get("/v1/queue", gpu_model=model, marker=marker)["queue"]
    leases = body["leases"]
    return render_template("dashboard/queue.html", groups=by_model(leases), models=gpu_models(client),
                           model=model, now=rt.now(), count=len(leases), marker=marker,
                           next_marker=next_marker(body))


@bp.get("/share")
def share():
    client = api()
    model = request.args.get("gpu_model") or None
    body = client.get("/v1/share", gpu_model=model)["share"]
    return render_template("dashboard/share.html", groups=by_model(body["projects"]), models=gpu_models(client),
                           model=model, half_life=spoken_duration(body["half_life"]),
                           charged=any(r.get("queued_charge") is not None for r in body["projects"]))
