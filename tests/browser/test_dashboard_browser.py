"""The dashboard in headless Chromium against the demo in its own process:
log in, ask for a lease, see it queued with its ETA, cancel it; every page
renders with no console error. Screenshots: tests/browser/artifacts/."""
from __future__ import annotations

import re

from tests.browser.conftest import HORIZON

PAGES = {"leases": "/dashboard/leases", "new-lease": "/dashboard/leases/new", "capacity": "/dashboard/capacity",
         "quota": "/dashboard/quota", "volumes": "/dashboard/volumes", "admin-figures": "/dashboard/admin/figures",
         "admin-quotas": "/dashboard/admin/quotas", "admin-hosts": "/dashboard/admin/hosts"}


def dev_login(page, base, project, user, roles=("member",)):
    page.goto(base + "/dashboard/login")
    assert "DEV MODE" in page.inner_text(".devbanner")
    page.fill("#project", project)
    page.fill("#user", user)
    for role in ("reader", "member", "admin"):
        page.set_checked(f"#role_{role}", role in roles)
    page.click("#login")
    assert page.url.endswith("/dashboard/leases")


def new_lease(page, base, shape, instances, hours, name, action="#create-button"):
    page.goto(base + "/dashboard/leases/new")
    page.fill("#name", name)
    page.select_option("#shape", shape)
    page.fill("#instances", str(instances))
    page.fill("#hours", str(hours))
    page.click(action)


def test_log_in_ask_see_it_queued_with_its_eta_and_cancel_it(page, demo, artifacts):
    page.goto(demo + "/dashboard/")
    assert "/dashboard/login" in page.url                             # no page without a login
    dev_login(page, demo, "nlp-lab", "bob")
    new_lease(page, demo, "a100.x8", 2, 6, "bob-run")                # 16 of the 32 A100: it starts now
    page.screenshot(path=artifacts / "01-bob-lease-progress.png", full_page=True)
    dev_login(page, demo, "ml-vision", "alice")
    page.screenshot(path=artifacts / "02-alice-leases-empty.png", full_page=True)
    new_lease(page, demo, "a100.x8", 2, 4, "alice-run")              # the other 16
    new_lease(page, demo, "a100.x4", 1, 2, "alice-next", action="#preview-button")
    preview = page.inner_text("#preview")
    assert "It would wait at position 1 and start" in preview
    # the demo lets an H100 stand in for an A100 (the same memory): offered now, beside the A100s reserved
    offers = page.inner_text("#offers")
    assert "H100 instead of A100 (1 x 4 H100), now" in offers and "A100 reserved at 20" in offers, offers
    page.screenshot(path=artifacts / "03-new-lease-preview.png", full_page=True)
    page.click("#create-button")
    assert re.search(r"/dashboard/leases/[0-9a-f-]{36}$", page.url)
    queue = page.inner_text("#queue")
    # alice-run's end, 4 h after it started: "in 4 h" when all of this took under a second, else "in 3 h 59 min"
    assert "position 1" in queue and "starts 20" in queue and re.search(r"\(in (4 h|3 h \d+ min)\)", queue), queue
    page.screenshot(path=artifacts / "04-lease-queued-with-eta.png", full_page=True)
    page.goto(demo + "/dashboard/leases")
    row = page.inner_text("tr:has-text('alice-next')")
    assert "queued" in row and "position 1" in row and "starts" in row
    page.screenshot(path=artifacts / "05-leases-list-queued.png", full_page=True)
    page.click("text=alice-next")
    page.click("#cancel")
    assert "cancelled" in page.inner_text(".notice.ok")
    assert "cancelled" in page.inner_text("h1")
    assert "queued → cancelled" in page.inner_text("#events")
    page.screenshot(path=artifacts / "06-lease-cancelled.png", full_page=True)
    new_lease(page, demo, "a100.x4", 1, 2, "alice-h100", action="#preview-button")
    page.click("li.offer[data-kind='gpu_model'] button")             # one click takes the offer
    assert "lease alice-h100 is scheduled" in page.inner_text(".notice.ok")
    assert "1 x h100.x4 (4 H100)" in page.inner_text("main")
    page.screenshot(path=artifacts / "07-offer-taken.png", full_page=True)
    page.click("#cancel")
    assert page.console.errors == []


def test_every_page_renders_without_console_errors(page, demo, artifacts):
    dev_login(page, demo, "ml-vision", "olga", roles=("admin",))
    assert page.get_attribute("a.horizon", "href") == HORIZON
    new_lease(page, demo, "a100.x2", 1, 3, "olga-waits")              # every A100 is taken: it waits
    assert "queued" in page.inner_text("h1")
    for name, path in PAGES.items():
        reply = page.goto(demo + path)
        assert reply.status == 200, name
        assert page.locator("header.topbar").is_visible()
        page.screenshot(path=artifacts / f"page-{name}.png", full_page=True)
    page.goto(demo + "/dashboard/capacity")
    assert page.locator("#calendar svg").count() == 1
    assert page.locator("#calendar svg rect.waiting").count() == 1     # at its planned slot
    assert page.locator("#calendar svg line.now").count() == 1
    page.fill("#project_id", "nlp-lab")                             # the project switcher
    page.click("header.topbar button:has-text('Switch')")
    assert "nlp-lab" in page.input_value("#project_id")
    page.click("#logout")
    assert page.url.endswith("/dashboard/login")
    page.goto(demo + "/dashboard/leases")
    assert "/dashboard/login" in page.url                             # logged out for real
    assert page.console.errors == []
