"""A newcomer's walk (issue 19), in headless Chromium against the demo in its own process:
from the dashboard address the demo's banner prints, through the login, a new lease (its
preview, then its queue place and ETA), extending it, the shorten question and back, and
cancelling it. Every page reached answers without an error, has a way on or back, and
raises no console error; times read in UTC with the reader's local time beside them.
Screenshots: tests/browser/artifacts/walk-*.png."""
from __future__ import annotations

import json
import re
import urllib.request
from datetime import datetime, timedelta, timezone

from tests.browser.harness import Console
from tests.browser.test_dashboard_browser import dev_login

ZONE, ZONE_OFFSET = "Asia/Kolkata", timedelta(hours=5, minutes=30)   # no daylight saving: the same all year


def api_post(base: str, path: str, body: dict, project: str, user: str) -> dict:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "X-Project-Id": project, "X-User-Id": user, "X-Roles": "member"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


class Walk:
    """The pages of one walk: each checked as it is reached, and shot."""

    def __init__(self, page, artifacts):
        self.page, self.artifacts, self.step = page, artifacts, 0
        page.on("response", lambda r: self.failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.failures: list[str] = []

    def reached(self, name: str) -> str:
        """Checks the page now shown; returns its main text."""
        page = self.page
        page.wait_for_load_state()
        self.step += 1
        page.screenshot(path=self.artifacts / f"walk-{self.step:02d}-{name}.png", full_page=True)
        assert self.failures == [], (name, self.failures)
        assert page.locator(".notice.error").count() == 0, (name, page.inner_text(".notice.error"))
        assert not re.fullmatch(r"\d{3}", page.inner_text("h1").strip()), (name, "an error page")
        onward = page.locator("nav.side a, a#back, main a, form button[type=submit]").count()
        assert onward > 0, (name, "a dead end: no link or form on or back")
        assert page.console.errors == [], (name, page.console.errors)
        return page.inner_text("main") if page.locator("main").count() else page.inner_text("body")

    def local_times_beside_utc(self) -> int:
        """Each <time> reads its UTC text, then the reader's local time (the zone of the context)."""
        checked = 0
        for element in self.page.locator("time[datetime]").all():
            stamp = datetime.fromisoformat(element.get_attribute("datetime").replace("Z", "+00:00"))
            utc_text, local_text = element.inner_text(), element.locator(".local").inner_text()
            assert utc_text.startswith(stamp.strftime("%Y-%m-%d %H:%M UTC")), utc_text
            local = stamp.astimezone(timezone(ZONE_OFFSET))
            assert local.strftime("%H:%M") in local_text and local_text.startswith(" ("), local_text
            checked += 1
        return checked


def test_a_new_user_walks_from_the_banner_address_to_a_cancelled_lease_with_no_dead_end(
        browser, demo, demo_workdir, artifacts):
    banner = (demo_workdir / "service.log").read_text()
    address = re.search(r"dashboard\s+(http://\S+)", banner).group(1)
    assert address == demo + "/dashboard"                                 # no trailing slash, as printed
    # the H100s are all taken, each project at its quota: the newcomer's lease waits its turn
    api_post(demo, "/v1/leases", {"name": "walk-nlp-h100", "shape": "h100.x4", "duration": "8h"}, "nlp-lab", "nina")
    api_post(demo, "/v1/leases", {"name": "walk-ml-h100", "shape": "h100.x4", "duration": "8h"}, "ml-vision", "max")

    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id=ZONE)
    page = context.new_page()
    page.console = Console(page)
    walk = Walk(page, artifacts)
    try:
        page.goto(address)
        assert "/dashboard/login" in page.url
        walk.reached("login")
        dev_login(page, demo, "ml-vision", "newcomer")
        walk.reached("leases")
        page.click("main a:has-text('New lease')")
        text = walk.reached("new-lease-form")
        assert "Priority class" in text and "Network" in text
        page.fill("#name", "walk-first")
        page.select_option("#shape", "h100.x1")
        page.fill("#hours", "2")
        page.click("#preview-button")
        preview = walk.reached("new-lease-preview")
        assert "It would wait at position 1 and start" in preview and "(in 8 h)" in preview, preview
        assert "start now" not in preview and "Network: ml-vision-net" in preview, preview
        page.click("#create-button")
        assert re.search(r"/dashboard/leases/[0-9a-f-]{36}$", page.url)
        text = walk.reached("lease-queued")
        queue = page.inner_text("#queue")
        assert "position 1" in queue and re.search(r"starts 20\S+ \d\d:\d\d UTC", queue), queue
        assert re.search(r"\(in (8 h|7 h \d+ min)\)", queue), queue
        assert walk.local_times_beside_utc() >= 3

        page.fill("#hours", "1")
        page.click("#extend")
        text = walk.reached("lease-extended")
        assert re.fullmatch(r"extended by 1 h: the lease now ends 20\S+ \d\d:\d\d UTC", page.inner_text(".notice.ok"))
        assert page.inner_text("table tr:has(th:text('Duration')) td") == "3 h"
        extended_end = page.inner_text("#end")

        page.fill("#shrink-hours", "1")
        page.click("#shrink")
        text = walk.reached("shorten-question")
        assert "Shorten lease walk-first by 1 h?" in page.inner_text("h1")
        page.click("#back")                                               # "No, keep its end"
        walk.reached("lease-kept")
        assert page.inner_text("table tr:has(th:text('Duration')) td") == "3 h"
        assert page.inner_text("#end") == extended_end                    # nothing changed

        page.click("#cancel")                                             # a waiting lease: at once
        text = walk.reached("lease-cancelled")
        assert "cancelled" in page.inner_text(".notice.ok") and "cancelled" in page.inner_text("h1")
        assert page.inner_text("#end").startswith("cancelled at 20")
        walk.local_times_beside_utc()
        page.click("nav.side a:has-text('Leases')")
        walk.reached("leases-open")
        page.click("main a:has-text('all')")
        walk.reached("leases-all")
        row = page.inner_text("tr:has-text('walk-first')")
        assert "cancelled at 20" in row and "never started" in row, row
    finally:
        context.close()


def test_pages_read_the_same_without_javascript(browser, demo):
    """The local times are an addition: without the script every time still reads in UTC."""
    context = browser.new_context(java_script_enabled=False, timezone_id=ZONE)
    page = context.new_page()
    try:
        dev_login(page, demo, "ml-vision", "noscript")
        page.goto(demo + "/dashboard/leases?show=all")
        times = page.locator("time[datetime]")
        assert times.count() > 0 and page.locator("time .local").count() == 0
        assert all(re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d UTC", t.inner_text()) for t in times.all())
    finally:
        context.close()
