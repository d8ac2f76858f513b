"""A lease's events a page at a time (GET /v1/leases/{id}/events): the next link's marker seeks
the page (its cost the page's, not the events before it) and tells nothing of an event's id,
which counts every project's events; a count (the CLI's `after`) is still a marker."""
from __future__ import annotations

import base64
import random
import re

import pytest
from sqlalchemy import event, select

from gpu_tenancy.db import models as m
from tests.conftest import headers
from tests.functional.test_leases import add_events, ask


def walk(client, url: str, rng: random.Random, between=lambda: None, top: int = 40) -> tuple[list[str], list[str]]:
    """Every page from `url` on, each of a random size up to `top` (the link's limit changed): the messages
    in the order listed, and the markers the links carried. `between` runs after each page."""
    seen: list[str] = []
    markers: list[str] = []
    while url:
        body = client.get(url, headers=headers()).get_json()
        assert "events" in body, body
        seen += [e["message"] for e in body["events"]]
        between()
        links = body.get("events_links", [])
        url = links[0]["href"].replace("http://localhost", "") if links else ""
        if url:
            markers.append(re.search(r"marker=([^&]*)", url).group(1))
            url = re.sub(r"limit=[0-9]+", f"limit={rng.randrange(1, top + 1)}", url)
    return seen, markers


def messages(sessions, lease_id: str) -> list[str]:
    with sessions() as s:
        return list(s.scalars(select(m.Event.message).where(m.Event.lease_id == lease_id).order_by(m.Event.id)))


@pytest.mark.parametrize("seed", range(4))
def test_a_walk_lists_each_event_once_while_the_lease_and_others_add_events(client, runtime, seed):
    """Events are added between the pages (to this lease and to another, whose ids fall in
    between). Oldest first: every event once, those added meanwhile at the end. Newest first: the
    events there were when the walk began, each once; with a count for a marker, each event
    added meanwhile pushed one already listed onto the next page again."""
    rng = random.Random(seed)
    runtime.config.max_page_size = 40
    lease = ask(client, name="chatty")["lease"]
    other = ask(client, name="other")["lease"]
    add_events(runtime.sessions, lease["id"], rng.randrange(60, 160), seed)
    added = iter(range(10_000))

    def more() -> None:
        for _ in range(rng.randrange(0, 4)):
            add_events(runtime.sessions, rng.choice([lease["id"], other["id"]]), 1, next(added))
    before = messages(runtime.sessions, lease["id"])
    newest_first, _ = walk(client, f"/v1/leases/{lease['id']}/events?sort_dir=desc&limit={rng.randrange(1, 41)}",
                           rng, more)
    assert newest_first == before[::-1]
    oldest_first, _ = walk(client, f"/v1/leases/{lease['id']}/events?limit={rng.randrange(1, 41)}", rng, more)
    after = messages(runtime.sessions, lease["id"])
    assert oldest_first == after[:len(oldest_first)] and len(oldest_first) >= len(before)


def test_a_marker_tells_nothing_of_the_event_ids_and_only_opens_where_it_was_given(client, runtime):
    runtime.config.max_page_size = 5
    lease = ask(client, name="chatty")["lease"]
    other = ask(client, name="other")["lease"]
    add_events(runtime.sessions, lease["id"], 12, 0)
    add_events(runtime.sessions, other["id"], 12, 1)
    with runtime.sessions() as s:
        ids = list(s.scalars(select(m.Event.id).where(m.Event.lease_id == lease["id"])))
    _, asc = walk(client, f"/v1/leases/{lease['id']}/events?limit=5", random.Random(0), top=5)
    _, desc = walk(client, f"/v1/leases/{lease['id']}/events?limit=5&sort_dir=desc", random.Random(0), top=5)
    assert asc and desc
    for marker in asc + desc:   # neither in its text nor in its bytes, in any usual form
        raw = base64.urlsafe_b64decode(marker.split(".")[-1] + "==")
        forms = [i.to_bytes(n, order) for i in ids for n in (4, 8) for order in ("big", "little")]
        assert not marker.isdigit() and not any(form in raw for form in forms), marker
    assert len({len(marker) for marker in asc + desc}) == 1   # the same length whatever the id
    _, again = walk(client, f"/v1/leases/{lease['id']}/events?limit=5", random.Random(0), top=5)
    assert not set(again) & set(asc)   # the same pages: other markers (a fresh nonce each)

    def code(lease_id: str, marker: str, query: str = "") -> str | None:
        reply = client.get(f"/v1/leases/{lease_id}/events?marker={marker}{query}", headers=headers())
        return None if reply.status_code == 200 else reply.get_json()["errors"][0]["code"]
    assert code(lease["id"], asc[0]) is None and code(lease["id"], desc[0], "&sort_dir=desc") is None
    tampered = asc[0][:-2] + ("AA" if not asc[0].endswith("AA") else "BB")
    for lease_id, marker, query in ((other["id"], asc[0], ""),         # another lease's
                                    (lease["id"], asc[0], "&sort_dir=desc"),   # the other order's
                                    (lease["id"], tampered, ""), (lease["id"], "e1.", ""),
                                    (lease["id"], "e1.!!", ""), (lease["id"], "x" * 300, "")):
        assert code(lease_id, marker, query) == "gpu_tenancy.invalid_marker", (marker, query)


def test_a_count_is_still_a_marker_and_its_next_link_seeks(client, runtime):
    """The CLI's `after` (osc/client.py: lease_events) and links given before: how many events
    the pages before listed. Its next link carries a marker of the new kind, the walk goes on."""
    runtime.config.max_page_size = 40
    lease = ask(client, name="chatty")["lease"]
    add_events(runtime.sessions, lease["id"], 90, 0)
    every = messages(runtime.sessions, lease["id"])
    for direction, order in (("asc", every), ("desc", every[::-1])):
        seen, markers = walk(client, f"/v1/leases/{lease['id']}/events?marker=7&limit=10&sort_dir={direction}",
                             random.Random(1))
        assert seen == order[7:] and markers and not any(marker.isdigit() for marker in markers)
    assert walk(client, f"/v1/leases/{lease['id']}/events?marker={len(every)}", random.Random(0))[0] == []


def test_a_later_page_reads_only_its_own_rows_off_the_lease_index(client, runtime, db_url):
    """The page after a marker: a range of ix_events_lease_id_id from the marker's event, in the
    page's order, not every event of the lease sorted (PostgreSQL had ix_events_lease_id alone and
    sorted them: 0.4-0.5 s for a page at the end of 200,000 events, the newest page scanned the
    primary key backwards through the other leases' events: 0.8 s)."""
    from gpu_tenancy.engine.events import of_lease
    lease = ask(client, name="chatty")["lease"]
    add_events(runtime.sessions, lease["id"], 30, 0)
    statements: list[tuple[str, dict]] = []
    for newest_first in (False, True):
        with runtime.sessions() as s:
            conn = s.connection()
            def record(conn_, cursor, statement, parameters, context, executemany) -> None:
                if "FROM events" in statement:
                    statements.append((statement, parameters))
            event.listen(conn, "before_cursor_execute", record)
            rows, more = of_lease(s, lease["id"], 0, 5, newest_first, after=10**6 if newest_first else 0)
            event.remove(conn, "before_cursor_execute", record)
            assert len(rows) == 5 and more
            statement, parameters = statements[-1]
            if db_url.startswith("sqlite"):
                plan = " ".join(r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
                assert "ix_events_lease_id_id (lease_id=? AND id>? AND id<?)" in plan and "TEMP B-TREE" not in plan, plan
            else:   # on a table this small any plan is cheap: whether the index gives the page's order
                conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
                conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")
                plan = " ".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
                assert "ix_events_lease_id_id" in plan and "Sort" not in plan, plan
