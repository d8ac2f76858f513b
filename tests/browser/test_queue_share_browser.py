"""Everyone's queue and the fair-share standing in headless Chromium against the demo:
reached from the nav, a member's own lease linked and the other project's unnamed, an
admin's view with every name. Screenshots: tests/browser/artifacts/queue-*.png, share-*.png."""
from __future__ import annotations

import json
import urllib.request

from tests.browser.test_dashboard_browser import dev_login


def ask(base, project, user, name, shape):
    request = urllib.request.Request(
        base + "/v1/leases", method="POST",
        data=json.dumps({"name": name, "shape": shape, "duration": "4h"}).encode(),
        headers={"X-Project-Id": project, "X-User-Id": user, "X-Roles": "member",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())["lease"]


def test_the_queue_and_share_pages_for_a_member_and_an_admin(page, demo, artifacts):
    # the H100 pool (2 hosts x 4) full, then one more lease of each project waits for it
    ask(demo, "nlp-lab", "bob", "bob-h100", "h100.x4")
    ask(demo, "ml-vision", "alice", "alice-h100", "h100.x4")
    mine = ask(demo, "ml-vision", "alice", "alice-h100-next", "h100.x2")
    theirs = ask(demo, "nlp-lab", "bob", "bob-h100-secret", "h100.x2")
    assert mine["status"] == theirs["status"] == "queued"

    dev_login(page, demo, "ml-vision", "alice")
    page.click("nav.side >> text=Everyone's queue")
    assert page.url.endswith("/dashboard/queue")
    page.click("text=H100")
    # loaded before the rows are counted (a locator's count() does not wait: a CI run counted none)
    page.wait_for_url("**/dashboard/queue?gpu_model=H100")
    h100 = page.locator("table.queue[data-gpu-model='H100']")
    assert h100.locator("tr.mine").count() == 1 and h100.locator("tr.other").count() == 1
    assert "alice-h100-next" in h100.locator("tr.mine").inner_text()
    other = h100.locator("tr.other").inner_text()
    assert "another project" in other and "waits for its project's quota" in other
    assert "nlp-lab" not in page.content() and "bob-h100-secret" not in page.content()
    page.screenshot(path=artifacts / "queue-member-h100.png", full_page=True)
    page.goto(demo + "/dashboard/queue")
    page.screenshot(path=artifacts / "queue-member-all.png", full_page=True)
    h100.locator("tr.mine a").click()                               # its own lease, one click away
    assert page.url.endswith(f"/dashboard/leases/{mine['id']}")

    page.click("nav.side >> text=Fair share")
    page.wait_for_url("**/dashboard/share")
    share = page.locator("table.share[data-gpu-model='H100']")
    assert share.locator("tr.mine").count() == 1 and "4 of 4" in share.locator("tr.mine").inner_text()
    assert "nlp-lab" not in page.content()
    page.screenshot(path=artifacts / "share-member.png", full_page=True)

    dev_login(page, demo, "ml-vision", "olga", roles=("admin",))
    page.goto(demo + "/dashboard/queue?gpu_model=H100")
    assert "bob-h100-secret" in page.inner_text("table.queue") and "nlp-lab" in page.inner_text("table.queue")
    page.screenshot(path=artifacts / "queue-admin-h100.png", full_page=True)
    page.goto(demo + "/dashboard/share")
    assert "nlp-lab" in page.inner_text("main")
    page.screenshot(path=artifacts / "share-admin.png", full_page=True)
    assert page.console.errors == []
