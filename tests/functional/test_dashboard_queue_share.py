"""The dashboard's everyone's-queue and fair-share pages (Flask's test client, dev login):
linked in the nav, what a member sees of other projects (no names), what an admin sees,
the GPU model filter, and that the figures are the API's."""
from __future__ import annotations

import re

from tests.conftest import headers
from tests.functional.test_dashboard import login

VISION = headers("ml-vision", "member", user="alice")
NLP = headers("nlp-lab", "member", user="bob")


def ask(client, who, name, instances=1, duration="PT1H"):
    reply = client.post("/v1/leases", json={"name": name, "shape": "a100.x8", "instances": instances,
                                            "duration": duration}, headers=who)
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def contend(client):
    for who, name in ((VISION, "vision-run"), (NLP, "nlp-run")):
        ask(client, who, name, instances=2, duration="PT2H")
    return ask(client, VISION, "vision-next"), ask(client, NLP, "nlp-secret-run")


def rows(page: str, table: str) -> list[str]:
    body = re.search(rf'<table class="{table}"[^>]*>(.*?)</table>', page, re.S).group(1)
    return re.findall(r"<tr class=.*?</tr>", body, re.S)


def test_both_pages_are_in_the_nav_for_every_persona(client):
    for roles in (("reader",), ("member",), ("admin",)):
        login(client, roles=roles)
        nav = client.get("/dashboard/leases").text
        assert 'href="/dashboard/queue"' in nav and 'href="/dashboard/share"' in nav
        for path in ("/dashboard/queue", "/dashboard/share"):
            reply = client.get(path)
            assert reply.status_code == 200 and 'class="current"' in reply.text, (roles, path)


def test_the_queue_page_shows_a_member_its_own_lease_and_the_others_unnamed(client):
    vision, nlp = contend(client)
    login(client)
    page = client.get("/dashboard/queue").text
    entries = rows(page, "queue")
    assert len(entries) == 2
    own = [r for r in entries if 'class="mine"' in r][0]
    other = [r for r in entries if 'class="other"' in r][0]
    assert f'href="/dashboard/leases/{vision["id"]}"' in own and "vision-next" in own and "ml-vision" in own
    assert "another project" in other and "waits for its project&#39;s quota" in other
    assert "nlp-lab" not in page and "nlp-secret-run" not in page and nlp["id"] not in page
    # positions in planned order, and the ETA the API gives
    api = client.get("/v1/queue", headers=VISION).get_json()["queue"]["leases"]
    assert [re.search(r"<td>(\d+)</td>", r).group(1) for r in entries] == [str(e["position"]) for e in api]
    assert api[0]["eta"].replace("T", " ")[:16] in page


def test_an_admin_sees_every_name_and_the_filter_narrows_to_a_model(client):
    contend(client)
    login(client, roles=("admin",))
    page = client.get("/dashboard/queue").text
    assert "nlp-secret-run" in page and "nlp-lab" in page and "another project" not in page
    h100 = client.get("/dashboard/queue?gpu_model=H100").text
    assert "No lease is waiting for H100" in h100 and "<strong>H100</strong>" in h100
    assert client.get("/dashboard/queue?gpu_model=A%20100").status_code == 400


def test_the_share_page_ranks_projects_with_the_apis_figures(client):
    contend(client)
    login(client)
    page = client.get("/dashboard/share").text
    assert "7 days" in page   # the planner's half-life, in words
    a100 = rows(page, "share")
    assert len(a100) == 2
    own = [r for r in a100 if 'class="mine"' in r][0]
    assert "ml-vision" in own and "16 of 16" in own and "(may borrow 8)" in own
    assert "nlp-lab" not in page
    api = client.get("/v1/share?gpu_model=A100", headers=VISION).get_json()["share"]["projects"]
    assert [re.search(r"<td>(\d+)</td>", r).group(1) for r in a100] == [str(r["rank"]) for r in api]
    login(client, roles=("admin",))
    assert "nlp-lab" in client.get("/dashboard/share?gpu_model=A100").text


def test_the_queue_page_shows_a_page_says_more_wait_and_links_the_next(client, runtime):
    """The API pages the queue (its default page, here the operator's max_page_size of 2): the page
    shows the first page, says more wait and links the next, whose entries follow on; every waiting
    lease is on one page, once, in order."""
    runtime.config.max_page_size = 2
    for i in range(7):   # 2 x 16 GPUs run, 5 wait
        ask(client, NLP if i % 2 else VISION, f"q{i}", instances=2 if i < 2 else 1)
    login(client, roles=("admin",))
    page, shown, pages = client.get("/dashboard/queue").text, [], 0
    while True:
        pages += 1
        entries = rows(page, "queue")
        assert 0 < len(entries) <= 2
        shown += [re.search(r"<td>(\d+)</td>", r).group(1) for r in entries]
        found = re.search(r'<a class="next" href="([^"]+)"', page)
        if found is None:
            break
        assert "More leases wait" in page and "on this page" in page
        page = client.get(found.group(1).replace("&amp;", "&")).text
    assert shown == ["1", "2", "3", "4", "5"] and pages == 3
    assert "first page" in page and "More leases wait" not in page
    bad = client.get("/dashboard/queue?marker=nonsense")
    assert bad.status_code == 400 and "not a queue marker" in bad.text
