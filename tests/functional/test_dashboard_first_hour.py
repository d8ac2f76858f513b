"""The dashboard's part of a newcomer's first hour (issue 19): each as a test that failed before."""
from __future__ import annotations

import re

from tests.conftest import headers
from tests.functional.test_dashboard import ask, csrf_of, login


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
