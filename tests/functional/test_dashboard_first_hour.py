"""The dashboard's part of a newcomer's first hour (issue 19): each as a test that failed before."""
from __future__ import annotations

import re

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import headers
from tests.functional.test_dashboard import ask, login


def api_lease(client, lease_id: str) -> dict:
    return client.get(f"/v1/leases/{lease_id}", headers=headers()).get_json()["lease"]


def test_a_cancelled_lease_shows_when_it_was_cancelled_not_an_end(client, engine_tick):
    """A lease cancelled before it started showed the end it was planned for, in the API, the
    CLI's list and the dashboard's list and page."""
    made = client.post("/v1/leases", json={"name": "never", "shape": "a100.x1", "duration": "4h"},
                       headers=headers()).get_json()["lease"]
    assert made["end"] is not None and made["cancelled_at"] is None
    planned_end = made["end"].replace("T", " ")[:16]
    assert client.delete(f"/v1/leases/{made['id']}", headers=headers()).status_code in (200, 202, 204)
    lease = api_lease(client, made["id"])
    assert lease["status"] == "cancelled" and lease["end"] is None and lease["start"] is None
    assert lease["cancelled_at"] is not None
    listed = [x for x in client.get("/v1/leases?status=cancelled", headers=headers()).get_json()["leases"]
              if x["id"] == made["id"]]
    assert listed[0]["end"] is None and listed[0]["cancelled_at"] == lease["cancelled_at"]

    login(client)
    cancelled_at = lease["cancelled_at"].replace("T", " ")[:16]
    row = re.search(rf'<tr data-lease="{made["id"]}">.*?</tr>',
                    client.get("/dashboard/leases?show=all").text, re.DOTALL).group(0)
    assert "cancelled at" in row and cancelled_at in row and planned_end not in row
    page = client.get(f"/dashboard/leases/{made['id']}").text
    assert re.search(r'<td id="end">cancelled at .*' + re.escape(cancelled_at), page)
    assert planned_end not in page.split('<h2>Events')[0]


def test_the_cli_lists_a_cancelled_lease_with_its_cancel_time_in_the_end_column():
    from gpu_tenancy.osc.lease import list_cell
    cancelled = {"status": "cancelled", "end": None, "cancelled_at": "2026-12-01T10:00:00Z"}
    assert list_cell(cancelled, "end") == "cancelled at 2026-12-01T10:00:00Z"
    running = {"status": "active", "end": "2026-12-01T14:00:00Z", "cancelled_at": None}
    assert list_cell(running, "end") == "2026-12-01T14:00:00Z"


def test_the_dashboard_preselects_the_image_the_api_boots_by_default(client, engine_tick):
    """The form preselected the alphabetically first image (the browser's first option) while
    the API boots the catalog's first (oldest): one default now, marked in GET /v1/images."""
    images = client.get("/v1/images", headers=headers()).get_json()["images"]
    defaults = [i["name"] for i in images if i["default"]]
    assert len(defaults) == 1
    made = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "1h"}, headers=headers())
    assert made.get_json()["lease"]["image"] == defaults[0]
    assert sorted(i["name"] for i in images)[0] != defaults[0]   # the demo catalog tells the two apart
    login(client)
    form = client.get("/dashboard/leases/new").text
    selected = re.findall(r'<option value="([^"]+)" selected>', form.split('id="image"')[1].split("</select>")[0])
    assert selected == defaults


def test_the_new_lease_form_asks_for_boot_network_floating_ip_and_priority_class(client):
    """The form could not ask for a priority class (preemptible), a network, a floating IP, or
    a tenant boot: each goes to the API under its own name."""
    csrf = login(client)
    form = client.get("/dashboard/leases/new").text
    for field in ('name="boot" value="service"', 'name="boot" value="tenant"', 'name="network"',
                  'name="floating_ip"', 'name="priority_class"', '<option value="preemptible"'):
        assert field in form, field
    made = ask(client, csrf, name="cheap", priority_class="preemptible", network="ml-vision-net",
               floating_ip="yes")
    assert made.status_code == 302, made.text
    lease = api_lease(client, made.headers["Location"].rsplit("/", 1)[1])
    assert lease["priority_class"] == "preemptible" and lease["preemptible"] is True
    assert lease["network"]["name"] == "ml-vision-net" and lease["network"]["chosen_by"] == "request"
    assert lease["floating_ip"] is True and lease["boot"] == "service"

    made = ask(client, csrf, name="own-boot", boot="tenant", image="rocky-9-cuda-12")
    assert made.status_code == 302, made.text
    lease = api_lease(client, made.headers["Location"].rsplit("/", 1)[1])
    assert lease["boot"] == "tenant" and lease["image"] is None and lease["network"] is None

    refused = ask(client, csrf, name="mixed", boot="tenant", key_name="mine", floating_ip="yes")
    assert refused.status_code == 400
    assert "a key pair, a floating IP only apply when the service boots the VMs" in refused.text
    assert 'value="tenant" id="boot-tenant" checked' in refused.text   # the form keeps what was asked


def test_the_preview_shows_the_network_and_either_starts_now_or_waits_never_both(client):
    csrf = login(client)
    now = ask(client, csrf, action="preview", shape="a100.x8", instances="2", hours="6", floating_ip="yes")
    box = now.text.split('id="preview"')[1].split("</div>")[0]
    assert 'id="preview-start"' in box and "It would start <strong>now</strong>" in box
    assert "position" not in box and "wait" not in box
    assert re.search(r'Network: <strong>ml-vision-net</strong> <span class="muted">\(the project&#39;s only '
                     r'network\)</span>, with a floating IP for each VM', box), box
    assert ask(client, csrf, shape="a100.x8", instances="2", hours="6").status_code == 302   # 16 of 32 A100
    other = login(client, project="nlp-lab", user="bob")
    assert ask(client, other, shape="a100.x8", instances="2", hours="3").status_code == 302  # the other 16
    csrf = login(client)
    later = ask(client, csrf, action="preview", shape="a100.x4", name="later")
    box = later.text.split('id="preview"')[1].split("</div>")[0]
    assert "It would wait at position 1 and start" in box and "(in 6 h)" in box
    assert 'id="preview-start"' not in box and "now" not in box.replace("Network", "")


def test_shorten_asks_on_its_own_page_first_then_shortens(client, engine_tick):
    """Extend never shortens; the dashboard had no way to shorten a lease. Now "Shorten…" asks on
    the confirmation page End-it-now and Drain use, and only the confirmed ask changes the end."""
    csrf = login(client)
    made = ask(client, csrf, name="trim", hours="6")
    lease_id = made.headers["Location"].rsplit("/", 1)[1]
    engine_tick(60)
    before = api_lease(client, lease_id)
    page = client.get(f"/dashboard/leases/{lease_id}").text
    assert f'action="/dashboard/leases/{lease_id}/shrink"' in page and 'id="shrink"' in page
    asked = client.post(f"/dashboard/leases/{lease_id}/shrink", data={"csrf_token": csrf, "hours": "2"})
    assert asked.status_code == 200 and "Shorten lease trim by 2 h?" in asked.text
    old_end, new_end = (before["end"].replace("T", " ")[:16],
                        rfc3339(parse_time(before["end"]) - 7200).replace("T", " ")[:16])
    assert f"It then ends {new_end} UTC instead of {old_end} UTC" in asked.text
    assert 'name="confirmed" value="yes"' in asked.text and 'name="hours" value="2"' in asked.text
    assert f'href="/dashboard/leases/{lease_id}" id="back"' in asked.text     # a way back, unchanged
    assert api_lease(client, lease_id)["end"] == before["end"]
    done = client.post(f"/dashboard/leases/{lease_id}/shrink", data={"csrf_token": csrf, "hours": "2",
                                                                     "confirmed": "yes"})
    assert done.status_code == 302
    after = api_lease(client, lease_id)
    assert after["duration"] == before["duration"] - 7200
    assert parse_time(after["end"]) == parse_time(before["end"]) - 7200
    assert "shortened by 2 h" in client.get(done.headers["Location"]).text

    too_much = client.post(f"/dashboard/leases/{lease_id}/shrink", data={"csrf_token": csrf, "hours": "4",
                                                                         "confirmed": "yes"})
    assert "is not less than the lease" in client.get(too_much.headers["Location"]).text
    assert api_lease(client, lease_id)["duration"] == after["duration"]


def test_a_queued_leases_reasons_give_their_times_for_the_local_clock_too(client):
    """Queue reasons carried raw RFC 3339 times ("until 2026-12-01T10:00:05Z") where every
    other time on the page is written for the reader's zone."""
    for project in ("ml-vision", "ml-vision", "nlp-lab", "nlp-lab"):   # the demo cloud's 32 A100, all taken
        client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"}, headers=headers(project))
    waiting = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "2h"}, headers=headers()).get_json()
    assert waiting["lease"]["status"] == "queued"
    assert any(re.search(r"\dT\d", r["message"]) for r in waiting["lease"]["queue"]["reasons"])
    login(client)
    page = client.get(f"/dashboard/leases/{waiting['lease']['id']}").text
    reasons = re.search(r'<ul class="reasons">.*?</ul>', page, re.DOTALL).group(0)
    assert "<time datetime=" in reasons and not re.search(r">[^<]*\d{4}-\d\d-\d\dT\d\d:\d\d", reasons)
