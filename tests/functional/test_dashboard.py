"""The dashboard through Flask's test client, in dev mode (noauth2): every page
for each persona, the forms (CSRF included), and that every figure shown is
what the API says."""
from __future__ import annotations

import csv
import io
import re
from urllib.parse import urlencode

import pytest
from sqlalchemy import func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.failures import FailureClass
from tests.conftest import headers

PAGES = ["/dashboard/leases", "/dashboard/leases?show=all", "/dashboard/leases/new", "/dashboard/capacity",
         "/dashboard/capacity?days=7", "/dashboard/quota", "/dashboard/volumes"]
ADMIN_PAGES = ["/dashboard/admin/figures", "/dashboard/admin/figures?days=1", "/dashboard/admin/quotas",
               "/dashboard/admin/hosts", "/dashboard/admin/whatif"]


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def login(client, project="ml-vision", user="alice", roles=("member",)) -> str:
    """Dev login; returns the session's CSRF token."""
    page = client.get("/dashboard/login").text
    form = {"csrf_token": csrf_of(page), "project": project, "user": user, **{f"role_{r}": "1" for r in roles}}
    reply = client.post("/dashboard/login", data=form)
    assert reply.status_code == 302, reply.text
    return csrf_of(client.get("/dashboard/leases").text)


def ask(client, csrf, action="create", **fields):
    form = {"csrf_token": csrf, "action": action, "shape": "a100.x2", "instances": "1", "hours": "2",
            "start_mode": "now", "volume_mode": "none", **fields}
    return client.post("/dashboard/leases/new", data=form)


def lease_rows(sessions):
    with sessions() as s:
        return list(s.scalars(select(m.Lease).order_by(m.Lease.created_at)))


def test_every_page_asks_for_a_login_first_and_the_login_page_says_dev_mode(client):
    for path in PAGES + ADMIN_PAGES:
        reply = client.get(path)
        assert reply.status_code == 302 and "/dashboard/login" in reply.headers["Location"], path
    page = client.get("/dashboard/login")
    assert page.status_code == 200 and "DEV MODE" in page.text and "noauth2" in page.text
    to_login = client.get("/dashboard/quota?x=1").headers["Location"]
    assert to_login.endswith("/dashboard/login?next=/dashboard/quota?x%3D1")
    form = {"csrf_token": csrf_of(client.get(to_login).text), "project": "ml-vision", "user": "alice",
            "role_member": "1"}
    assert client.post(to_login, data=form).headers["Location"] == "/dashboard/quota?x=1"   # back where it was


def test_the_session_cookie_is_http_only_and_holds_no_identity(client, sessions):
    page = client.get("/dashboard/login").text
    reply = client.post("/dashboard/login", data={"csrf_token": csrf_of(page), "project": "ml-vision",
                                                  "user": "alice", "role_member": "1"})
    cookie = [c for c in reply.headers.getlist("Set-Cookie") if c.startswith("gt_dashboard=")][0]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/dashboard" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert "alice" not in value and "ml-vision" not in value
    with sessions() as s:
        row = s.scalars(select(m.DashboardSession)).one()
        assert row.id_hash != value and row.user_id == "alice" and row.roles == ["member", "reader"]


def test_a_login_post_without_its_csrf_cookie_value_is_refused(client, sessions):
    client.get("/dashboard/login")
    reply = client.post("/dashboard/login", data={"csrf_token": "forged", "project": "p", "user": "u",
                                                  "role_member": "1"})
    assert reply.status_code == 400 and "stale" in reply.text
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.DashboardSession)) == 0


@pytest.mark.parametrize("bad", [{"project": "a b"}, {"user": ""}, {"role_member": ""}])
def test_a_dev_login_with_a_bad_identity_says_what_is_wrong(client, bad):
    page = client.get("/dashboard/login").text
    form = {"csrf_token": csrf_of(page), "project": "ml-vision", "user": "alice", "role_member": "1", **bad}
    reply = client.post("/dashboard/login", data={k: v for k, v in form.items() if v != ""})
    assert reply.status_code == 400 and 'class="notice error"' in reply.text


@pytest.mark.parametrize("roles", [("reader",), ("member",), ("admin",)])
def test_each_persona_sees_every_tenant_page(client, roles):
    login(client, roles=roles)
    for path in PAGES:
        reply = client.get(path)
        assert reply.status_code == 200, (path, reply.text[:500])
        assert "gpu-tenancy" in reply.text and "ml-vision" in reply.text
    nav = client.get("/dashboard/leases").text
    assert ("/dashboard/admin/figures" in nav) == ("admin" in roles)


@pytest.mark.parametrize("roles", [("reader",), ("member",)])
def test_admin_pages_are_refused_to_members_and_readers(client, roles):
    login(client, roles=roles)
    for path in ADMIN_PAGES + ["/dashboard/admin/figures/cancel_ratio.csv", "/dashboard/admin/export/leases.json"]:
        reply = client.get(path)
        assert reply.status_code == 403, path


def test_admin_pages_render_for_an_admin(client):
    login(client, roles=("admin",))
    for path in ADMIN_PAGES:
        reply = client.get(path)
        assert reply.status_code == 200, (path, reply.text[:500])
    hosts = client.get("/dashboard/admin/hosts").text
    assert hosts.count('data-host="gpu-a100-') == 4 and hosts.count('data-host="gpu-h100-') == 2


def test_preview_shows_the_eta_and_creates_nothing_then_create_queues_it(client, sessions):
    csrf = login(client)
    assert ask(client, csrf, shape="a100.x8", instances="2", hours="6").status_code == 302  # 16 of 32 A100
    other = login(client, project="nlp-lab", user="bob")
    assert ask(client, other, shape="a100.x8", instances="2", hours="3").status_code == 302  # the other 16
    csrf = login(client)
    before = len(lease_rows(sessions))
    preview = ask(client, csrf, action="preview", shape="a100.x4", name="later")
    assert preview.status_code == 200 and 'id="preview"' in preview.text
    assert "2026-12-01 14:00 UTC" in preview.text and "in 6 h" in preview.text   # when its own 16 GPUs end
    assert "project ml-vision holds 16 of 16 A100 GPUs" in preview.text          # the reason, in words
    assert "position 1" in preview.text
    assert len(lease_rows(sessions)) == before
    created = ask(client, csrf, shape="a100.x4", name="later")
    assert created.status_code == 302
    page = client.get(created.headers["Location"]).text
    assert "queued" in page and "position <strong>1</strong>" in page and "2026-12-01 14:00 UTC" in page
    assert "lease later is queued" in page                       # the notice after the redirect, once
    assert "lease later is queued" not in client.get(created.headers["Location"]).text
    listing = client.get("/dashboard/leases").text
    assert "later" in listing and re.search(r'starts <time datetime="2026-12-01T14:00[^"]*">2026-12-01 14:00 UTC', listing) and "holds 16 of 16" in listing


def test_the_preview_offers_alternatives_and_one_click_takes_one(client, sessions):
    csrf = login(client)
    assert ask(client, csrf, shape="a100.x8", instances="2", hours="6").status_code == 302  # 16 of 32 A100
    other = login(client, project="nlp-lab", user="bob")
    assert ask(client, other, shape="a100.x8", instances="2", hours="3").status_code == 302  # the other 16
    csrf = login(client)
    preview = ask(client, csrf, action="preview", shape="a100.x4", name="later")
    box = preview.text.split('id="offers"')[1].split("</ul>")[0]
    offers = re.findall(r'name="accept_offer" value="([^"]+)"', box)
    assert len(offers) == 1 and 'data-kind="later"' in box   # no other model is set to stand in for A100
    # its own leases' end, and the cloud's 5 s release
    assert re.search(r"A100 reserved at <time datetime=\"2026-12-01T14:00:05Z\">2026-12-01 14:00 UTC</time>", box)
    taken = ask(client, csrf, shape="a100.x4", name="later", accept_offer=offers[0])
    assert taken.status_code == 302
    page = client.get(taken.headers["Location"]).text
    assert "lease later is scheduled" in page and "2026-12-01 14:00 UTC" in page


def test_an_invalid_form_keeps_the_values_and_says_why(client, sessions):
    csrf = login(client)
    reply = ask(client, csrf, hours="0", name="keep-me")
    assert reply.status_code == 400 and "above 0 hours" in reply.text and 'value="keep-me"' in reply.text
    reply = ask(client, csrf, shape="a100.x8", instances="4")        # over the quota: the API's own words
    assert reply.status_code == 400 and "project ml-vision may hold 16" in reply.text
    assert lease_rows(sessions) == []


@pytest.mark.parametrize("hours", ["inf", "1e400", "-inf", "nan", "8761"])
def test_hours_that_are_not_a_finite_number_up_to_a_year_are_a_form_error(client, sessions, hours):
    """float() reads inf, 1e400 and nan: inf passed the check above 0, and int(round(inf))
    was a 500."""
    csrf = login(client)
    reply = ask(client, csrf, hours=hours, name="keep-me")
    assert reply.status_code == 400 and reply.mimetype == "text/html", reply.status_code
    assert "above 0 hours and at most 8760 hours" in reply.text and 'value="keep-me"' in reply.text
    assert lease_rows(sessions) == []


def test_a_reader_cannot_ask_for_a_lease(client, sessions):
    csrf = login(client, roles=("reader",))
    reply = ask(client, csrf)
    assert reply.status_code == 400 and "policy does not allow lease:create" in reply.text
    assert lease_rows(sessions) == []


def test_forms_without_the_csrf_token_change_nothing(client, sessions):
    login(client)
    for path, form in (("/dashboard/leases/new", {"action": "create", "shape": "a100.x1", "hours": "1"}),
                       ("/dashboard/project", {"project_id": "nlp-lab"})):
        assert client.post(path, data=form).status_code == 400
        assert client.post(path, data={**form, "csrf_token": "wrong"}).status_code == 400
    assert lease_rows(sessions) == []
    assert "Leases of ml-vision" in client.get("/dashboard/leases").text


def test_extend_and_cancel_through_the_lease_page(client, sessions, engine_tick):
    csrf = login(client)
    lease_url = ask(client, csrf, hours="2", name="run").headers["Location"]
    engine_tick()
    engine_tick(advance=30)
    page = client.get(lease_url).text
    assert "active" in page
    (row,) = lease_rows(sessions)
    assert f'<td id="flavor">gt-lease-{row.id} ({row.flavor_id})</td>' in page
    assert '<td id="boot">the service (0 of 1 VMs free)</td>' in page
    reply = client.post(lease_url + "/extend", data={"csrf_token": csrf, "hours": "1.5"})
    assert reply.status_code == 302
    assert "extended by 1.5 h" in client.get(lease_url).text
    (row,) = lease_rows(sessions)
    assert row.duration == int(3.5 * 3600)
    assert client.post(lease_url + "/extend", data={"csrf_token": csrf, "hours": "-1"}).status_code == 302
    assert "a number above 0" in client.get(lease_url).text
    asked = client.post(lease_url + "/cancel", data={"csrf_token": csrf})   # a running lease: asked first
    assert asked.status_code == 200 and "Yes, end it now" in asked.text and "data volume is kept" in asked.text
    (row,) = lease_rows(sessions)
    assert row.status == "active"
    client.post(lease_url + "/cancel", data={"csrf_token": csrf, "confirmed": "yes"})
    page = client.get(lease_url).text
    (row,) = lease_rows(sessions)
    assert row.status in ("ending", "ended") and "End it now" not in page
    assert "transition" not in page and "&rarr; active" in page        # the events, in words
    again = client.post(lease_url + "/cancel", data={"csrf_token": csrf})
    assert again.status_code == 302 and "not cancelled" in client.get(lease_url).text


def test_another_projects_lease_is_not_found(client):
    csrf = login(client)
    lease_url = ask(client, csrf).headers["Location"]
    login(client, project="nlp-lab", user="bob")
    assert client.get(lease_url).status_code == 404


def test_the_project_switcher_changes_the_project_of_every_page(client):
    csrf = login(client)
    ask(client, csrf, name="vision-run")
    reply = client.post("/dashboard/project", data={"csrf_token": csrf, "project_id": "nlp-lab",
                                                    "next": "/dashboard/quota"})
    assert reply.headers["Location"].endswith("/dashboard/quota")
    assert "Quota and use of nlp-lab" in client.get("/dashboard/quota").text
    assert "vision-run" not in client.get("/dashboard/leases").text
    assert client.post("/dashboard/project", data={"csrf_token": csrf, "project_id": "x/y"}).status_code == 400
    external = client.post("/dashboard/project", data={"csrf_token": csrf, "project_id": "ml-vision",
                                                       "next": "https://evil.example/"})
    assert external.headers["Location"].endswith("/dashboard/leases")           # no open redirect


@pytest.mark.parametrize("target", ["/dashboard\r\nX-Injected: 1", "/dashboard/quota\n", "/dashboard\x7f",
                                    "/dashboard\tx"], ids=repr)
def test_a_next_page_with_a_control_character_is_the_leases_page(client, target):
    """Werkzeug refuses a CR or LF in the Location header: such a next page was a 500."""
    to_login = "/dashboard/login?" + urlencode({"next": target})
    form = {"csrf_token": csrf_of(client.get(to_login).text), "project": "ml-vision", "user": "alice",
            "role_member": "1"}
    reply = client.post(to_login, data=form)
    assert reply.status_code == 302 and reply.headers["Location"] == "/dashboard/leases", reply.status_code
    csrf = csrf_of(client.get("/dashboard/leases").text)
    reply = client.post("/dashboard/project", data={"csrf_token": csrf, "project_id": "ml-vision", "next": target})
    assert reply.status_code == 302 and reply.headers["Location"] == "/dashboard/leases", reply.status_code


def test_quota_page_shows_limits_use_now_and_gpu_hours(client, engine_tick):
    csrf = login(client)
    ask(client, csrf, shape="a100.x4", hours="4")
    engine_tick()
    engine_tick(advance=3600)
    page = client.get("/dashboard/quota").text
    row = re.search(r"<td>A100</td>(.*?)</tr>", page, re.S).group(1)
    assert "4 of 16" in row and ">8<" in row and "7 d" in row
    assert re.search(r"<td>4\.0</td>|<td>3\.9</td>", row)            # GPU-hours so far (about 4 × 1 h)


def test_volumes_are_the_clouds_with_the_leases_that_use_them(client, cloud, runtime, engine_tick):
    csrf = login(client)
    own = cloud.add_volume("ml-vision", 20, "datasets")
    cloud.add_volume("nlp-lab", 30, "not-ours")
    ask(client, csrf, volume_mode="new", volume_size_gb="50", name="with-data")
    page = client.get("/dashboard/volumes").text
    assert "50 GB for" in page and own in page and "datasets" in page and "free for a lease" in page
    assert "not-ours" not in page                                          # another project's
    engine_tick()
    engine_tick(advance=30)
    page = client.get("/dashboard/volumes").text
    row = re.search(r"<tr>\s*<td><code>[^<]*</code></td><td>gt-.*?</tr>", page, re.S).group(0)
    assert "in use by" in row and "with-data" in row and "50 GB" in row and "in-use" in row
    assert "To be made" not in page
    cloud.inject_failure("ensure_volume", FailureClass.VOLUME)              # a lease whose volume is never made
    ask(client, csrf, volume_mode="new", volume_size_gb="70", name="no-volume")
    engine_tick()
    engine_tick(advance=30)
    with runtime.sessions() as session:
        assert session.scalars(select(m.Lease.status).where(m.Lease.name == "no-volume")).one() == "failed"
    assert "70 GB for" not in client.get("/dashboard/volumes").text          # failed: nothing will be made


def test_capacity_calendar_draws_hosts_by_model_leases_now_and_waiting_slots(client):
    csrf = login(client)
    ask(client, csrf, shape="a100.x8", instances="2", hours="6", name="big")
    other = login(client, project="nlp-lab", user="bob")
    ask(client, other, shape="a100.x8", instances="2", hours="3", name="theirs")
    csrf = login(client)
    ask(client, csrf, shape="a100.x8", instances="1", hours="2", name="waits")   # every A100 is taken
    page = client.get("/dashboard/capacity").text
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    assert "A100: 32 GPUs on 4 hosts" in svg and "H100: 8 GPUs on 2 hosts" in svg
    assert svg.count('class="now"') == 1
    assert ">big<" in svg and "theirs" not in svg               # a tenant sees only its own leases by name
    assert "16 of 32" not in svg and "8 of 8 GPUs held" in svg  # but every host's held GPUs
    waiting = re.findall(r'class="lease waiting"', svg)
    assert len(waiting) == 1 and "waits (ml-vision): queued" in svg
    admin = login(client, roles=("admin",))
    assert admin and "theirs" in client.get("/dashboard/capacity").text


def test_admin_edits_a_quota_and_the_api_has_it(client):
    csrf = login(client, roles=("admin",))
    form = {"csrf_token": csrf, "project_id": "new-lab", "gpu_model": "H100", "gpus": "2", "borrow_gpus": "1",
            "max_hours": "12", "weight": "2"}
    assert client.post("/dashboard/admin/quotas", data=form).status_code == 302
    assert "saved: new-lab H100" in client.get("/dashboard/admin/quotas").text
    quota = client.get("/v1/quotas/new-lab", headers=headers("new-lab", "reader")).get_json()["quota"]
    assert quota["gpu_models"]["H100"] == {"gpus": 2, "borrow_gpus": 1, "max_duration": 12 * 3600, "weight": 2.0}
    client.post("/dashboard/admin/quotas", data={**form, "gpus": "-1"})
    assert "not saved" in client.get("/dashboard/admin/quotas").text
    client.post("/dashboard/admin/quotas", data={**form, "gpus": "many"})
    assert "whole numbers" in client.get("/dashboard/admin/quotas").text
    for hours in ("inf", "1e400"):   # a number, but none of hours: said as the others, not a 500
        assert client.post("/dashboard/admin/quotas", data={**form, "max_hours": hours}).status_code == 302
        assert "whole numbers" in client.get("/dashboard/admin/quotas").text


def test_figures_and_exports_download_as_csv_and_json(client, engine_tick, clock):
    csrf = login(client)
    ask(client, csrf, name="ran", hours="1")
    cancelled = ask(client, csrf, name="dropped", shape="a100.x8", instances="2",
                    start_mode="at", start_at="2026-12-01T12:00").headers["Location"]
    client.post(cancelled + "/cancel", data={"csrf_token": csrf})
    engine_tick()
    engine_tick(advance=30)
    clock.advance(3 * 3600)
    login(client, roles=("admin",))
    page = client.get("/dashboard/admin/figures").text
    assert page.count("<svg") >= 5
    ratio = client.get("/dashboard/admin/figures/cancel_ratio.json")
    assert ratio.headers["Content-Disposition"] == 'attachment; filename="cancel_ratio.json"'
    assert ratio.get_json()["rows"] == [{"day": "2026-12-01", "leases": 2, "cancelled": 1, "ratio": 0.5}]
    on_time = client.get("/dashboard/admin/figures/on_time_share.csv")
    assert on_time.mimetype == "text/csv"
    assert list(csv.DictReader(io.StringIO(on_time.text))) == [
        {"day": "2026-12-01", "leases": "1", "on_time": "1", "share": "1.0"}]
    first_try = client.get("/dashboard/admin/figures/first_try_success.json").get_json()["rows"]
    assert first_try == [{"day": "2026-12-01", "attempts": 1, "first_try_active": 1, "share": 1.0}]
    use = client.get("/dashboard/admin/figures/hourly_gpu_use.json?days=1").get_json()["rows"]
    assert use[-4]["hour"] == "2026-12-01T08:00Z" and use[-4]["gpus_in_use"] == 2.0 and use[-4]["gpus"] == 40
    leases = list(csv.DictReader(io.StringIO(client.get("/dashboard/admin/export/leases.csv").text)))
    assert sorted(r["name"] for r in leases) == ["dropped", "ran"]
    events = client.get("/dashboard/admin/export/events.json").get_json()["rows"]
    assert {"lease_id", "at", "kind", "from", "to", "message"} <= set(events[0])
    assert any(e["to"] == "cancelled" for e in events)
    usage = client.get("/dashboard/admin/export/usage.json").get_json()["rows"]
    assert usage == [{"project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": 2.0,
                      "start": usage[0]["start"], "end": usage[0]["end"]}]
    assert client.get("/dashboard/admin/figures/nothing.csv").status_code == 404
    assert client.get("/dashboard/admin/figures/cancel_ratio.xml").status_code == 404
    assert client.get("/dashboard/admin/figures?days=x").status_code == 400


def test_an_export_reads_its_rows_a_page_at_a_time_and_streams_them(client, engine_tick, runtime, monkeypatch):
    """Review: an export of leases or events read every row of up to 90 days in one query, built
    them all into one string, and sent that: a busy cloud's admin could exhaust an API worker's
    memory with one click. Now pages of EXPORT_PAGE rows, each in its own transaction, streamed."""
    from sqlalchemy import event

    from gpu_tenancy.engine import reports
    csrf = login(client)
    for i in range(5):
        ask(client, csrf, name=f"l{i}", hours="1")
    engine_tick()
    login(client, roles=("admin",))
    monkeypatch.setattr(reports, "EXPORT_PAGE", 2, raising=False)   # (absent before: the test fails below)
    reads: list[str] = []

    def seen(conn, cursor, statement, *_):
        if statement.startswith(("SELECT leases.", "SELECT events.")):   # not the other tables' by lease
            reads.append(statement)
    bind = runtime.sessions.kw["bind"]
    event.listen(bind, "before_cursor_execute", seen)
    try:
        leases = client.get("/dashboard/admin/export/leases.csv").text   # read: a streamed body
        body = client.get("/dashboard/admin/export/events.json").get_json()
    finally:
        event.remove(bind, "before_cursor_execute", seen)
    assert sorted(r["name"] for r in csv.DictReader(io.StringIO(leases))) == [f"l{i}" for i in range(5)]   # each once
    assert body["export"] == "events" and len(body["rows"]) >= 10   # requested and scheduled, at least
    assert len({r["lease_id"] for r in body["rows"]}) == 5
    exported = [s for s in reads if "LIMIT" not in s]
    assert not exported, exported   # every read of leases or events a bounded page
    assert len(reads) >= 3 + 5   # 5 leases 2 a page, and 10 events or more


def test_every_figure_of_the_reports_has_a_panel():
    from gpu_tenancy.dashboard.admin import FIGURES
    from gpu_tenancy.engine.reports import FIGURES as COMPUTED
    assert list(FIGURES) == list(COMPUTED)


def test_logout_ends_the_session(client, sessions):
    csrf = login(client)
    reply = client.post("/dashboard/logout", data={"csrf_token": csrf})
    assert reply.status_code == 302 and reply.headers["Location"].endswith("/dashboard/login")
    assert client.get("/dashboard/leases").status_code == 302
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.DashboardSession)) == 0


def test_a_dashboard_login_is_no_identity_for_the_api(client):
    login(client, roles=("admin",))
    assert client.get("/v1/leases").status_code == 401


def test_admin_drains_and_undrains_a_host_from_the_hosts_page(client):
    csrf = login(client, roles=("admin",))
    asked = client.post("/dashboard/admin/hosts/gpu-a100-3", data={"csrf_token": csrf, "drained": "true"})
    assert asked.status_code == 200 and "Yes, drain gpu-a100-3" in asked.text      # asked first
    assert "resume slots parked leases hold there" in asked.text                    # what moves, said
    assert "<strong>drained</strong>" not in client.get("/dashboard/admin/hosts").text
    assert client.post("/dashboard/admin/hosts/gpu-a100-3", data={"csrf_token": csrf, "drained": "true",
                                                                  "confirmed": "yes"}).status_code == 302
    page = client.get("/dashboard/admin/hosts").text
    assert "gpu-a100-3 is drained" in page
    row = re.search(r'<tr data-host="gpu-a100-3">.*?</tr>', page, re.S).group(0)
    assert "<strong>drained</strong>" in row and "Undrain" in row
    assert "url(#hatch)" in client.get("/dashboard/capacity").text       # the calendar marks it
    client.post("/dashboard/admin/hosts/gpu-a100-3", data={"csrf_token": csrf, "drained": "false"})
    assert "gpu-a100-3 takes new leases again" in client.get("/dashboard/admin/hosts").text
    client.post("/dashboard/admin/hosts/nowhere", data={"csrf_token": csrf, "drained": "true", "confirmed": "yes"})
    assert "nowhere unchanged: no GPU host named" in client.get("/dashboard/admin/hosts").text
    # a name with URL characters is one name (quoted), not gpu-a100-3 with a query after it
    client.post("/dashboard/admin/hosts/gpu-a100-3%3Fx", data={"csrf_token": csrf, "drained": "true",
                                                              "confirmed": "yes"})
    assert "gpu-a100-3?x unchanged" in client.get("/dashboard/admin/hosts").text
    assert "<strong>drained</strong>" not in client.get("/dashboard/admin/hosts").text
    member = login(client)
    client.post("/dashboard/admin/hosts/gpu-a100-1", data={"csrf_token": member, "drained": "true",
                                                           "confirmed": "yes"})
    login(client, roles=("admin",))
    assert "<strong>drained</strong>" not in client.get("/dashboard/admin/hosts").text


def test_pages_forbid_framing_and_all_but_their_own_script_file_and_are_not_cached(client):
    login(client)
    for path in ("/dashboard/leases", "/dashboard/login"):
        reply = client.get(path)
        assert reply.headers["X-Frame-Options"] == "DENY"
        csp = reply.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert re.search(r"(^|; )script-src 'self'(;|$)", csp)   # no inline script, nothing from elsewhere
        assert re.findall(r"<script[^>]*>", reply.text) == [
            '<script src="/dashboard/static/localtime.js" defer>']
        assert reply.headers["Cache-Control"] == "no-store"


def test_changes_made_through_the_dashboard_are_audited_with_the_user_and_address(client):
    csrf = login(client, user="carol")
    form = {"csrf_token": csrf, "action": "create", "shape": "a100.x1", "hours": "1", "name": "audited"}
    client.post("/dashboard/leases/new", data=form, environ_base={"REMOTE_ADDR": "192.0.2.7"})
    client.post("/dashboard/leases/new", data={**form, "name": "proxied"},
                headers={"X-Forwarded-For": "198.51.100.9"})
    records = client.get("/v1/audit?action=lease.create", headers=headers("x", "admin")).get_json()["audit_records"]
    assert [(r["user_id"], r["user_project_id"], r["remote_address"], r["after"]["name"]) for r in records] == [
        ("carol", "ml-vision", "192.0.2.7", "audited"),
        ("carol", "ml-vision", "127.0.0.1", "proxied")]   # no trusted proxy: the header is anyone's word
    assert records[0]["after"]["links"][0]["href"].startswith("http://localhost/v1/leases/")


def test_the_lease_page_shows_the_network_the_addresses_and_the_ssh_line(client, engine_tick):
    login(client)
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "floating_ip": True},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    page = client.get(f"/dashboard/leases/{lease['id']}").text
    assert "ml-vision-net, with floating IPs" in page
    for address in shown["servers"][0]["addresses"]:
        assert f"{address['ip']} <span class=\"muted\">({address['kind']}, ml-vision-net)</span>" in page
    assert f'<code class="ssh">{shown["servers"][0]["ssh"]}</code>' in page


def test_an_open_lease_is_listed_however_many_ended_leases_the_project_has(client, runtime):
    """The API lists leases oldest first, a page at a time: the leases page read only the
    first page, so past max_page_size leases ever asked, a new open lease was missing."""
    runtime.config.max_page_size = 3
    csrf = login(client)
    for n in range(3):
        lease_url = ask(client, csrf, name=f"old-{n}").headers["Location"]
        client.post(lease_url + "/cancel", data={"csrf_token": csrf, "confirmed": "yes"})
        runtime.clock.advance(60)
    ask(client, csrf, name="the-new-one")
    client.get("/dashboard/quota")   # shows the notice that names it
    assert "the-new-one" in client.get("/dashboard/leases").text
    assert "the-new-one" in client.get("/dashboard/leases?show=all").text


def test_notices_kept_for_the_next_page_are_bounded(client, sessions):
    """Each form a user sends adds a notice to the login's row until a page shows them: posted
    in a loop without reading a page, they grew the row (rewritten whole each time) without end."""
    csrf = login(client)
    lease_url = ask(client, csrf).headers["Location"]
    client.get("/dashboard/quota")
    for _ in range(60):
        client.post(lease_url + "/extend", data={"csrf_token": csrf, "hours": "-1"})
    with sessions() as s:
        (row,) = s.scalars(select(m.DashboardSession))
        assert 0 < len(row.notices) <= 20
    assert "a number above 0" in client.get(lease_url).text


@pytest.mark.parametrize("typed", ["nlp-lab?all=1", "nlp-lab#x", "nlp-lab/../ml-vision"], ids=repr)
def test_a_quota_for_a_project_id_with_url_characters_changes_no_other_project(client, typed):
    """The project id as typed went into the API's path unquoted: 'nlp-lab?all=1' set
    nlp-lab's quota (the rest read as a query). Quoted, the id is the API's to judge whole."""
    csrf = login(client, roles=("admin",))
    before = client.get("/v1/quotas/nlp-lab", headers=headers("nlp-lab", "reader")).get_json()["quota"]
    form = {"csrf_token": csrf, "project_id": typed, "gpu_model": "H100", "gpus": "7", "weight": "1"}
    assert client.post("/dashboard/admin/quotas", data=form).status_code == 302
    assert client.get("/v1/quotas/nlp-lab", headers=headers("nlp-lab", "reader")).get_json()["quota"] == before


def test_the_lease_page_shows_the_newest_events_and_says_older_ones_are_left_out(client, runtime):
    """A lease's events only grow (its guest's readiness reports, one per VM every 15 s): the page
    listed every one. It shows the newest page of them, oldest of those first, and says so."""
    from tests.functional.test_leases import add_events
    runtime.config.max_page_size = 25
    lease = client.post("/v1/leases", json={"name": "chatty", "shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    add_events(runtime.sessions, lease["id"], 60, 0)
    login(client)
    page = client.get(f"/dashboard/leases/{lease['id']}").text
    table = re.search(r'<table id="events">(.*?)</table>', page, re.S).group(1)
    shown = re.findall(r"report (\d+)", table)
    assert shown == [str(i) for i in range(35, 60)]   # the newest 25, in order
    assert 'id="older-events"' in page
    few = client.post("/v1/leases", json={"name": "quiet", "shape": "a100.x1", "duration": "PT1H"},
                      headers=headers()).get_json()["lease"]
    assert 'id="older-events"' not in client.get(f"/dashboard/leases/{few['id']}").text
