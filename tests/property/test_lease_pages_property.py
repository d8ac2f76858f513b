"""GET /v1/leases pages: seeded random creates and cancels (several in one second, so leases
tie on their creation time) across two projects, and after each a few page chains: by members
and admins, of one project and of all, oldest or newest first, filtered by status or not, with
random page sizes. Every chain shows each lease the caller may see exactly once, in order, never
another project's, and each lease as GET /v1/leases/{id} shows it (its page's allocations and
servers are its own). A lease cancelled while a chain is followed (the marker's own, say) leaves
the chain whole; a marker of no lease, or of another project's lease for a member, is the
documented error (400 gpu_tenancy.invalid_marker). The Blazar listing has no pages: it shows
each lease it may once, oldest first."""
from __future__ import annotations

import random
import uuid

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from tests.conftest import headers

PROJECTS = ("ml-vision", "nlp-lab")
SEEDS = range(4)
STEPS = 25
SHAPES = ("a100.x1", "a100.x2", "a100.x8", "h100.x1")
STATUS_FILTERS = ((), ("queued",), ("scheduled", "queued"), ("cancelled",), ("active", "provisioning", "scheduled"))


def member(project: str) -> dict:
    return headers(project)


def admin(project: str) -> dict:
    return headers(project, "admin", user="ops")


def path_of(href: str) -> str:
    assert href.startswith("http://localhost/v1/leases?"), href
    return href.removeprefix("http://localhost")


def chain(client, who: dict, query: str, limit: int, meddle=None) -> list[dict]:
    """Follows the next links from the first page; `meddle(page)` runs between two pages."""
    got, url, pages = [], f"/v1/leases?limit={limit}{query}", 0
    while url:
        reply = client.get(url, headers=who)
        assert reply.status_code == 200, (url, reply.get_json())
        body = reply.get_json()
        assert 0 < len(body["leases"]) <= limit or (pages == 0 and not body["leases"]), (url, len(body["leases"]))
        got += body["leases"]
        pages += 1
        links = body.get("leases_links") or []
        assert len(links) <= 1 and all(link["rel"] == "next" for link in links)
        url = path_of(links[0]["href"]) if links else None
        if url and meddle:
            meddle(body["leases"])
    return got


def all_leases(runtime) -> list[dict]:
    """Every lease, oldest first, read from the table (not through the listing under test)."""
    with session_scope(runtime.sessions) as session:
        rows = session.execute(select(m.Lease.id, m.Lease.project_id, m.Lease.status, m.Lease.created_at)).all()
    return [{"id": r.id, "project_id": r.project_id, "status": r.status}
            for r in sorted(rows, key=lambda r: (r.created_at, r.id))]


MADE: list[str] = []


def create(client, rng) -> None:
    project = rng.choice(PROJECTS)
    reply = client.post("/v1/leases", json={"shape": rng.choice(SHAPES), "duration": rng.choice(["PT1H", "PT8H"]),
                                            "instances": rng.choice([1, 1, 2])}, headers=member(project))
    assert reply.status_code == 201, reply.get_json()
    MADE.append(reply.get_json()["lease"]["id"])


def cancel(client, lease_id: str) -> None:
    lease = client.get(f"/v1/leases/{lease_id}", headers=admin("ml-vision")).get_json()["lease"]
    if lease["status"] in ("requested", "queued", "scheduled", "active", "provisioning"):
        reply = client.delete(f"/v1/leases/{lease_id}", headers=member(lease["project_id"]))
        assert reply.status_code in (204, 409), reply.get_json()


def viewers(rng) -> tuple[str, dict, str, str | None]:
    """(who, their headers, extra query, the project they see: None for every one)."""
    project, other = rng.sample(PROJECTS, 2)
    return rng.choice([
        ("member", member(project), "", project),
        ("member, own project named", member(project), f"&project_id={project}", project),
        ("admin", admin(project), "", project),
        ("admin, all projects", admin(project), "&all_projects=true", None),
        ("admin, another project", admin(project), f"&project_id={other}", other),
        ("admin, all projects, one named", admin(project), f"&all_projects=true&project_id={other}", other),
    ])


def expected(leases: list[dict], project: str | None, statuses: tuple, newest_first: bool) -> list[str]:
    ids = [lease["id"] for lease in leases if (project is None or lease["project_id"] == project)
           and (not statuses or lease["status"] in statuses)]
    return ids[::-1] if newest_first else ids


def strip_times(lease: dict) -> dict:
    return {k: v for k, v in lease.items() if k not in ("eta", "queue")}   # worked out at the moment asked


@pytest.fixture(autouse=True)
def made():
    MADE.clear()
    yield
    MADE.clear()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_page_chain_shows_each_visible_lease_once_in_order(client, runtime, seed):
    rng = random.Random(seed)
    broken: list[str] = []
    for _ in range(rng.randint(3, 8)):
        create(client, rng)
    runtime.engine.run_once()
    for step in range(STEPS):
        kind = rng.random()
        if kind < 0.45:
            for _ in range(rng.randint(1, 3)):   # in one second, or not: ties on the creation time
                create(client, rng)
        elif kind < 0.65 and MADE:
            cancel(client, rng.choice(MADE))
        elif kind < 0.75:
            runtime.engine.run_once()
        if rng.random() < 0.5:
            runtime.clock.advance(rng.choice([1, 1, 60]))
        leases = all_leases(runtime)
        for shown in range(3):
            who, head, query, project = viewers(rng)
            statuses = rng.choice(STATUS_FILTERS)
            newest_first = rng.random() < 0.5
            query += "".join(f"&status={s}" for s in statuses) + ("&sort_dir=desc" if newest_first else
                                                                rng.choice(["", "&sort_dir=asc"]))
            limit = rng.choice([1, 2, 3, 5, 50])
            got = chain(client, head, query, limit)
            ids = [lease["id"] for lease in got]
            want = expected(leases, project, statuses, newest_first)
            if ids != want:
                broken.append(f"seed {seed} step {step}: {who}, limit {limit}, {query}: {ids} != {want}")
            for lease in rng.sample(got, min(len(got), 4)) if shown == 0 else ():
                alone = client.get(f"/v1/leases/{lease['id']}", headers=head).get_json()["lease"]
                if strip_times(lease) != strip_times(alone):
                    broken.append(f"seed {seed} step {step}: {who}, {query}: lease {lease['id']} listed as "
                                  f"{strip_times(lease)}, shown as {strip_times(alone)}")
        if MADE and rng.random() < 0.3:
            # a chain while leases are cancelled between its pages, the marker's own among them: a
            # cancelled lease stays in the (unfiltered) listing, so the chain is still every lease once
            project = rng.choice(PROJECTS)

            def meddle(page):
                if rng.random() < 0.5:
                    cancel(client, page[-1]["id"] if rng.random() < 0.5 else rng.choice(MADE))
            query = rng.choice(["", "&sort_dir=desc"])
            want = expected(all_leases(runtime), project, (), bool(query))
            ids = [lease["id"] for lease in chain(client, member(project), query, rng.choice([1, 2, 3]), meddle)]
            if ids != want:
                broken.append(f"seed {seed} step {step}: cancels during the chain {query}: {ids} != {want}")
            leases = all_leases(runtime)
        check_markers(client, rng, leases, broken, f"seed {seed} step {step}")
        check_blazar(client, rng, leases, broken, f"seed {seed} step {step}")
    assert len(MADE) > 10
    assert not broken, "\n".join(broken[:10]) + f"\n({len(broken)} in all)"


def check_markers(client, rng, leases, broken, where) -> None:
    project, other = rng.sample(PROJECTS, 2)
    theirs = [lease["id"] for lease in leases if lease["project_id"] == other]
    for _ in range(3):
        marker = rng.choice([str(uuid.uuid4()), "not-a-lease", *(rng.sample(theirs, 1) if theirs else [])])
        head, query = rng.choice([(member(project), ""), (member(project), f"&project_id={project}"),
                                  (admin(project), ""), (admin(project), f"&project_id={project}&sort_dir=desc"),
                                  (member(project), "&sort_dir=desc&status=queued")])
        reply = client.get(f"/v1/leases?marker={marker}{query}", headers=head)
        error = (reply.get_json() or {}).get("errors", [{}])[0]
        if reply.status_code != 400 or error.get("code") != "gpu_tenancy.invalid_marker":
            broken.append(f"{where}: marker {marker} for {head['X-Roles']} of {project}{query}: "
                          f"{reply.status_code} {reply.get_json()}")
    if theirs and rng.random() < 0.3:   # an admin listing every project takes any lease as its marker
        reply = client.get(f"/v1/leases?all_projects=true&marker={theirs[0]}", headers=admin(project))
        if reply.status_code != 200:
            broken.append(f"{where}: an admin's marker {theirs[0]} of all projects: {reply.status_code}")


def check_blazar(client, rng, leases, broken, where) -> None:
    project = rng.choice(PROJECTS)
    for head, seen in ((member(project), project), (admin(project), None)):
        reply = client.get("/reservation/v1/leases", headers=head)
        assert reply.status_code == 200, reply.get_json()
        ids = [lease["id"] for lease in reply.get_json()["leases"]]
        want = [lease["id"] for lease in leases if lease["status"] != "cancelled"
                and (seen is None or lease["project_id"] == seen)]
        if ids != want:
            broken.append(f"{where}: Blazar listing for {head['X-Roles']} of {project}: {ids} != {want}")
