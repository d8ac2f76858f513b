"""The policy what-if page (admins): propose changes, watch the replay, and read the two wait
CDFs and the figures side by side. A client of /v1/whatif, as the other pages are of the API."""
from __future__ import annotations

from flask import redirect, render_template, request, url_for

from gpu_tenancy.dashboard import bp, charts
from gpu_tenancy.dashboard.admin import WAIT, require_admin
from gpu_tenancy.dashboard.login import api, flash


@bp.route("/admin/whatif", methods=["GET", "POST"])
def whatif():
    require_admin()
    client = api()
    if request.method == "POST":
        changes = [line.strip() for line in request.form.get("changes", "").splitlines() if line.strip()]
        try:
            days = float(request.form.get("days") or 30)
        except ValueError:
            days = -1   # the API says what is wrong with it
        reply = client.call("POST", "/v1/whatif", body={"days": days, "changes": changes})
        flash("replaying the history: this page shows its progress" if reply.ok else f"not started: {reply.error}",
              "ok" if reply.ok else "error")
        return redirect(url_for("dashboard.whatif"))
    listed = client.get("/v1/whatif")["whatifs"]
    job = client.get(f"/v1/whatif/{listed[0]['id']}")["whatif"] if listed else None
    chart = None
    if job and job["result"]:
        r = job["result"]
        chart = charts.cdf([("current", r["current"]["cdf"]), ("proposed", r["proposed"]["cdf"])])
    return render_template("dashboard/whatif.html", job=job, chart=chart, wait=WAIT,
                           refresh=bool(job and job["status"] == "running"),
                           last_changes="\n".join(job["changes"]) if job else "weight.<project>=2")
