"""Tenant pages: my leases (status, queue position, ETA, reasons), one lease
(events, progress, extend, cancel), a new lease with a dry-run preview, my
quota and use per GPU model, my volumes. Every figure and change comes from
the API."""
from __future__ import annotations

from collections import defaultdict
from urllib.parse import quote

from flask import g, redirect, render_template, request, url_for

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.dashboard import bp
from gpu_tenancy.dashboard.formatting import span, utc_text
from gpu_tenancy.dashboard.login import api, flash
from gpu_tenancy.timeutil import parse_time, rfc3339

WAITING = ("requested", "queued")
HOLDING = ("scheduled", "provisioning", "active", "ending")
REFRESHING = ("requested", "scheduled", "provisioning", "ending")   # pages of these refresh themselves
USAGE_DAYS = 30


@bp.get("/")
def home():
    return redirect(url_for("dashboard.leases"))


def newest_leases(client, statuses: list[str] | None = None, **query) -> list[dict]:
    """The newest max_page_size leases, newest first: one page the API lists newest first
    (its first page oldest first left out every lease asked after the first max_page_size:
    a new lease went missing once a project had asked that many)."""
    return client.get("/v1/leases", status=statuses, limit=rt.runtime().config.max_page_size, sort_dir="desc",
                      **query)["leases"]


@bp.get("/leases")
def leases():
    show = request.args.get("show", "open")
    rows = newest_leases(api(), list(WAITING + HOLDING) if show == "open" else None)
    return render_template("dashboard/leases.html", leases=rows, show=show, now=rt.now(),
                           refresh=any(r["status"] in REFRESHING for r in rows))


def lease_path(lease_id: str) -> str:
    """The API path of a lease: the id from the page's URL quoted whole, so that a '?'
    or '#' in it stays part of the id (and names no lease) instead of starting a query."""
    return "/v1/leases/" + quote(lease_id, safe="")


@bp.get("/leases/<lease_id>")
def lease(lease_id: str):
    client = api()
    row = client.get(lease_path(lease_id))["lease"]
    # the newest page of its events, shown oldest first (a lease's events only grow: the guest's
    # readiness reports add one per VM every 15 s), and whether older ones were left out
    page = client.get(lease_path(lease_id) + "/events", sort_dir="desc", limit=rt.runtime().config.max_page_size)
    events = page["events"][::-1]
    return render_template("dashboard/lease.html", lease=row, events=events, older="events_links" in page,
                           now=rt.now(),
                           refresh=row["status"] in REFRESHING, can_change=row["status"] in WAITING + HOLDING)


MAX_HOURS = 24 * 365   # what a form may ask for at once; also keeps out inf and nan, which float() reads


def form_hours() -> float | None:
    """The hours of an extend or shrink form: above 0, at most a year; None if not."""
    try:
        hours = float(request.form.get("hours", ""))
    except ValueError:
        return None
    return hours if 0 < hours <= MAX_HOURS else None


def ends(lease: dict) -> str:
    """When a changed lease ends, in words for a notice."""
    return f"ends {utc_text(lease['end'])}" if lease["end"] else f"lasts {span(lease['duration'])} once it starts"


@bp.post("/leases/<lease_id>/extend")
def extend(lease_id: str):
    hours = form_hours()
    if hours is None:
        flash("give the hours to add as a number above 0", "error")
        return redirect(url_for("dashboard.lease", lease_id=lease_id))
    client = api()
    row = client.get(lease_path(lease_id))["lease"]
    reply = client.call("PATCH", lease_path(lease_id), body={"duration": row["duration"] + int(hours * 3600)})
    if reply.ok:
        flash(f"extended by {hours:g} h: the lease now {ends(reply.body['lease'])}", "ok")
    else:
        flash(f"not extended: {reply.error}", "error")
    return redirect(url_for("dashboard.lease", lease_id=lease_id))


@bp.post("/leases/<lease_id>/shrink")
def shrink(lease_id: str):
    """Shortening is its own ask (extend never shortens), and the VMs go at the new end:
    the first click only asks, on a page of its own, as ending a lease now does."""
    hours = form_hours()
    back = url_for("dashboard.lease", lease_id=lease_id)
    if hours is None:
        flash("give the hours to take off as a number above 0", "error")
        return redirect(back)
    client = api()
    row = client.get(lease_path(lease_id))["lease"]
    duration = row["duration"] - int(round(hours * 3600))
    if duration < 60:
        flash(f"not shortened: {hours:g} h is not less than the lease's {span(row['duration'])}; "
              "to end it, use End it now (or Cancel)", "error")
        return redirect(back)
    if request.form.get("confirmed") != "yes":
        new_end = utc_text(rfc3339(parse_time(row["end"]) - int(round(hours * 3600)))) if row["end"] else None
        return render_template(
            "dashboard/confirm.html", title=f"Shorten lease {row['name']} by {hours:g} h?",
            consequence=(f"It then ends {new_end} instead of {utc_text(row['end'])}" if new_end else
                         f"It then lasts {span(duration)} instead of {span(row['duration'])}")
                        + ": at its end its VMs are deleted, with all that is not on the data volume; the data "
                          "volume is kept.",
            action=url_for("dashboard.shrink", lease_id=lease_id), fields={"hours": f"{hours:g}"},
            confirm_label=f"Yes, shorten it by {hours:g} h", back=back, back_label="No, keep its end")
    reply = client.call("PATCH", lease_path(lease_id), body={"duration": duration, "shrink": True})
    if reply.ok:
        flash(f"shortened by {hours:g} h: the lease now {ends(reply.body['lease'])}", "ok")
    else:
        flash(f"not shortened: {reply.error}", "error")
    return redirect(back)


@bp.post("/leases/<lease_id>/cancel")
def cancel(lease_id: str):
    """Ending a running lease deletes its VMs: that first click only asks (no script runs on
    these pages, so the question is a page of its own). A waiting lease is cancelled at once."""
    if request.form.get("confirmed") != "yes":
        row = api().call("GET", lease_path(lease_id))
        if row.ok and row.body["lease"]["status"] in ("active", "provisioning"):
            lease = row.body["lease"]
            return render_template(
                "dashboard/confirm.html", title=f"End lease {lease['name']} now?",
                consequence=f"Its {lease['instances']} VM(s) are deleted now, with all that is not on the data "
                            "volume; the data volume is kept.",
                action=url_for("dashboard.cancel", lease_id=lease_id), fields={}, confirm_label="Yes, end it now",
                back=url_for("dashboard.lease", lease_id=lease_id), back_label="No, keep it running")
    reply = api().call("DELETE", lease_path(lease_id))
    flash("cancelled" if reply.ok else f"not cancelled: {reply.error}", "ok" if reply.ok else "error")
    return redirect(url_for("dashboard.lease", lease_id=lease_id))


def lease_body(form) -> dict:
    """The API request from the form; ValueError says what is wrong in words."""
    body: dict = {"shape": form.get("shape", "")}
    if form.get("name", "").strip():
        body["name"] = form["name"].strip()
    try:
        body["instances"] = int(form.get("instances") or 1)
        hours = float(form.get("hours") or 0)
    except ValueError:
        raise ValueError("VMs and hours are numbers") from None
    if not 0 < hours <= MAX_HOURS:   # nan and inf too (int(round(inf)) raised OverflowError)
        raise ValueError(f"the duration must be above 0 hours and at most {MAX_HOURS} hours (a year)")
    body["duration"] = int(round(hours * 3600))
    if form.get("start_mode") == "at":
        if not form.get("start_at"):
            raise ValueError("give the start time, or choose 'as soon as possible'")
        body["start"] = form["start_at"] + (":00Z" if len(form["start_at"]) == 16 else "Z")
    if form.get("priority_class"):
        body["priority_class"] = form["priority_class"]
    if form.get("accept_offer"):   # a preview's offer: its shape, VMs, duration and start replace the form's
        body["accept_offer"] = form["accept_offer"]
    if form.get("boot", "service") == "tenant":
        return tenant_boot(form, body)
    body.update(service_boot(form))
    return body


def tenant_boot(form, body: dict) -> dict:
    """The tenant boots its own servers: what only a service boot uses is refused in words
    (the image list always has a choice, so the image alone is left out quietly)."""
    given = [label for label, set_ in (("a data volume", form.get("volume_mode", "none") != "none"),
                                       ("a key pair", form.get("key_name", "").strip()),
                                       ("a network", form.get("network", "").strip()),
                                       ("a floating IP", form.get("floating_ip"))) if set_]
    if given:
        raise ValueError(f"{', '.join(given)} only apply when the service boots the VMs: with 'the project "
                         "boots its own servers' each server takes its own; clear them or let the service boot")
    return {**body, "boot": "tenant"}


def service_boot(form) -> dict:
    """What the service boots the VMs with: image, volume, key pair, network, floating IP."""
    body: dict = {}
    if form.get("image"):
        body["image"] = form["image"]
    volume = form.get("volume_mode", "none")
    if volume == "new":
        try:
            body["volume"] = {"size_gb": int(form.get("volume_size_gb") or 0)}
        except ValueError:
            raise ValueError("the volume size is a whole number of GB") from None
    elif volume == "existing":
        body["volume"] = {"id": form.get("volume_id", "").strip()}
    if form.get("key_name", "").strip():
        body["key_name"] = form["key_name"].strip()
    if form.get("network", "").strip():
        body["network"] = form["network"].strip()
    if form.get("floating_ip"):
        body["floating_ip"] = True
    return body


@bp.route("/leases/new", methods=["GET", "POST"])
def new_lease():
    client = api()
    shapes = client.get("/v1/shapes")["shapes"]
    images = client.get("/v1/images")["images"]
    project = g.login.project_id
    classes = [c for c in client.get("/v1/priority_classes")["priority_classes"]
               if c["projects"] is None or project in c["projects"]]   # those this project may ask for
    preview = error = None
    offers: list[dict] = []
    form = request.form if request.method == "POST" else {"instances": "1", "hours": "4", "start_mode": "now",
                                                          "volume_mode": "none", "boot": "service"}
    if request.method == "POST":
        try:
            body = lease_body(request.form)
        except ValueError as exc:
            error = str(exc)
        else:
            dry_run = request.form.get("action") == "preview"
            reply = client.call("POST", "/v1/leases", query={"dry_run": "true"} if dry_run else None, body=body)
            if not reply.ok:
                error = reply.error
            elif dry_run:
                preview, offers = reply.body["lease"], reply.body["offers"]
            else:
                created = reply.body["lease"]
                flash(f"lease {created['name']} is {created['status']}", "ok")
                return redirect(url_for("dashboard.lease", lease_id=created["id"]))
    return render_template("dashboard/new_lease.html", shapes=[s for s in shapes if not s.get("retired_at")],
                           images=[i for i in images if not i.get("retired_at")], form=form, preview=preview,
                           offers=offers,
                           default_image=next((i["name"] for i in images if i.get("default")), None),
                           priority_classes=classes,
                           error=error, now=rt.now()), 400 if error else 200


def held_now(leases_: list[dict], now: int) -> dict[str, int]:
    """GPUs per model that the project's leases hold at this instant: a holding lease's GPUs
    are held from their start until the cloud has released them, even past their end
    (domain/held.py)."""
    held: dict[str, int] = defaultdict(int)
    for lease_ in leases_:
        if lease_["status"] in HOLDING:
            for a in lease_["allocations"]:
                if parse_time(a["start"]) <= now:
                    held[lease_["gpu_model"]] += a["gpus"]
    return held


@bp.get("/quota")
def quota():
    client = api()
    now = rt.now()
    project = g.login.project_id
    limits = client.get(f"/v1/quotas/{project}")["quota"]["gpu_models"]
    usage = client.get("/v1/usage", project_id=project, start=rfc3339(now - USAGE_DAYS * 86400), end=rfc3339(now))
    hours = {model: figures["gpu_hours"] for p in usage["usage"]["projects"] if p["project_id"] == project
             for model, figures in p["gpu_models"].items()}
    held = held_now(newest_leases(client, list(HOLDING)), now)   # (the default page of 100 undercounted)
    models = sorted(set(limits) | set(hours) | set(held))
    rows = [{"gpu_model": model, "limits": limits.get(model), "held": held.get(model, 0),
             "gpu_hours": hours.get(model, 0.0)} for model in models]
    return render_template("dashboard/quota.html", rows=rows, days=USAGE_DAYS)


@bp.get("/volumes")
def volumes():
    """The project's volumes as the cloud has them, with the leases that use or made them;
    and the volumes leases will make when they start."""
    leases = {x["id"]: x for x in newest_leases(api())}
    rows = [{**v, "lease": leases.get(v["lease_id"]), "made_by": leases.get(v["made_by_lease"])}
            for v in api().get("/v1/volumes")["volumes"]]
    will_make = WAITING + ("scheduled", "provisioning")   # a lease makes its volume when it starts
    pending = [{"size_gb": x["volume"].get("size_gb"), "lease": x}
               for x in sorted(leases.values(), key=lambda x: x["created_at"])
               if x.get("volume") and not x["volume"].get("id") and x["status"] in will_make]
    return render_template("dashboard/volumes.html", volumes=rows, pending=pending)
