"""A host whose nova-compute stops: marked down from the cloud's service state;
its running leases are re-placed elsewhere ahead of the queue and their owners
told; its planned leases are planned again; nothing new goes there until it is
back. The data volume stays the tenant's throughout."""
from __future__ import annotations

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import RELEASE, T0, headers

HOUR = 3600


def ask(client, project="ml-vision", **body):
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H", **body},
                        headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def show(client, lease, project="ml-vision"):
    return client.get(f"/v1/leases/{lease['id']}", headers=headers(project)).get_json()["lease"]


def events(client, lease, project="ml-vision"):
    return client.get(f"/v1/leases/{lease['id']}/events", headers=headers(project)).get_json()["events"]


def host_goes(runtime, cloud, engine_tick, host, up):
    cloud.set_host_state(host, up=up)
    engine_tick(advance=runtime.config.host_refresh_seconds)   # the engine reads the service state


def test_a_running_lease_moves_off_a_down_host_and_keeps_its_volume_and_end(client, runtime, cloud, engine_tick):
    lease = ask(client, volume={"size_gb": 50})
    engine_tick()
    engine_tick(advance=30)
    before = show(client, lease)
    assert before["status"] == "active"
    lost, old_server = before["servers"][0]["host"], before["servers"][0]["id"]
    [volume] = cloud.volumes()
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    after = show(client, lease)
    assert after["status"] in ("scheduled", "provisioning")
    assert after["allocations"][0]["host"] != lost
    assert after["end"] == before["end"]                       # the promised end holds
    assert [(f["class"], f["action"], f["hosts"]) for f in after["failures"]] == [("host_down", "replaced", [lost])]
    told = [e for e in events(client, lease) if e["kind"] == "host_failure"]
    assert len(told) == 1 and lost in told[0]["message"] and "data volume is kept" in told[0]["message"]
    assert old_server not in cloud.servers()
    engine_tick(advance=30)
    moved = show(client, lease)
    assert moved["status"] == "active" and moved["servers"][0]["host"] != lost
    assert cloud.volumes()[volume]["attached_to"] == moved["servers"][0]["id"]   # the same volume
    # nothing new goes to the down host; once it is back, it takes leases again
    others = [ask(client, "nlp-lab", duration="PT1H") for _ in range(2)]
    assert all(o["status"] == "scheduled" and o["allocations"][0]["host"] != lost for o in others)
    last = ask(client, duration="PT1H")
    assert last["status"] == "queued" and last["allocations"] == []   # only the down host is free
    host_goes(runtime, cloud, engine_tick, lost, up=True)
    assert show(client, last)["allocations"][0]["host"] == lost


def test_a_lease_rescued_from_a_down_host_goes_ahead_of_the_queue(client, runtime, cloud, engine_tick):
    m1, m2 = ask(client), ask(client)
    n1, n2 = ask(client, "nlp-lab", duration="PT1H"), ask(client, "nlp-lab")
    engine_tick()
    engine_tick(advance=30)
    waiting = ask(client, duration="PT1H")                      # asked before the host fails
    assert waiting["status"] == "queued"
    lost = show(client, m1)["servers"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    rescued, queued = show(client, m1), show(client, waiting)
    n1_end = show(client, n1, "nlp-lab")["end"]
    assert rescued["status"] == "scheduled" and rescued["start"] == rfc3339(parse_time(n1_end) + RELEASE)   # the first GPUs to come free
    assert queued["status"] == "queued" and queued["queue"]["eta"] > rescued["start"]
    assert any(e["kind"] == "host_failure" and "ahead of the queue" in e["message"] for e in events(client, m1))
    assert {show(client, x, p)["status"] for x, p in ((m2, "ml-vision"), (n2, "nlp-lab"))} == {"active"}


def test_a_planned_lease_on_a_down_host_is_planned_again_for_its_start(client, runtime, cloud, engine_tick):
    start = T0 + 2 * HOUR
    lease = ask(client, start="2026-12-01T10:00:00Z", duration="PT1H")
    planned = lease["allocations"][0]["host"]
    assert lease["status"] == "scheduled" and lease["start"] == "2026-12-01T10:00:00Z"
    host_goes(runtime, cloud, engine_tick, planned, up=False)
    again = show(client, lease)
    assert again["status"] == "scheduled" and again["start"] == "2026-12-01T10:00:00Z"
    assert again["allocations"][0]["host"] != planned
    assert again["failures"] == []        # nothing failed: it was only planned
    assert any(e["kind"] == "host_failure" and planned in e["message"] for e in events(client, lease))
    runtime.clock.set(start)
    engine_tick()
    engine_tick(advance=30)
    assert show(client, lease)["status"] == "active"


def test_a_host_disabled_in_the_cloud_keeps_its_running_lease_and_loses_its_planned_one(
        client, runtime, cloud, engine_tick):
    """`openstack compute service set --disable` on a host: Nova schedules nothing more there, so
    a lease planned on it is planned again elsewhere for its start (it failed at its start with
    no valid host, an attempt spent and its start late by the backoff); the one running there
    runs on, untouched."""
    running = ask(client, shape="a100.x4", duration="PT8H")
    engine_tick()
    engine_tick(advance=30)
    host = show(client, running)["servers"][0]["host"]
    start = "2026-12-01T10:00:00Z"
    planned = ask(client, "nlp-lab", shape="a100.x4", start=start, duration="PT1H")
    assert planned["allocations"][0]["host"] == host   # best fit: beside the running one
    cloud.set_host_state(host, enabled=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    again = show(client, planned, "nlp-lab")
    assert again["status"] == "scheduled" and again["start"] == start, again
    assert again["allocations"][0]["host"] != host and again["failures"] == []
    assert any(e["kind"] == "host_failure" and host in e["message"] and "disabled" in e["message"]
               for e in events(client, planned, "nlp-lab"))
    runtime.clock.set(parse_time(start))
    engine_tick()
    engine_tick(advance=30)
    started = show(client, planned, "nlp-lab")
    assert started["status"] == "active" and started["failures"] == [], started["failures"]
    assert show(client, running)["status"] == "active" and show(client, running)["failures"] == []


def test_a_lease_with_no_other_host_free_takes_the_first_that_frees(client, runtime, cloud, engine_tick):
    """H100 x4 on a cloud whose only other H100 host is taken: booked there from its end."""
    first = ask(client, shape="h100.x4", duration="PT8H")
    other = ask(client, "nlp-lab", shape="h100.x4", duration="PT2H")
    engine_tick()
    engine_tick(advance=30)
    lost = show(client, first)["servers"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    rescued, still = show(client, first), show(client, other, "nlp-lab")
    assert rescued["status"] == "scheduled" and rescued["servers"] == []
    assert rescued["start"] == rfc3339(parse_time(still["end"]) + RELEASE)
    assert rescued["allocations"][0]["host"] == still["servers"][0]["host"] != lost
    assert set(cloud.servers()) == {still["servers"][0]["id"]}


def test_a_lease_with_no_host_left_waits_and_is_first_when_one_is_back(client, runtime, cloud, engine_tick):
    """Both H100 hosts down: the rescued lease waits; when its host is back it goes
    before a lease asked for meanwhile, though fair share alone would favour that one."""
    earlier = ask(client, shape="h100.x4", duration="PT1H")   # ml-vision's H100 GPU-hours: 4
    engine_tick()
    engine_tick(advance=3600)
    engine_tick(advance=30)
    engine_tick(advance=10)
    assert show(client, earlier)["status"] == "ended"
    host_goes(runtime, cloud, engine_tick, "gpu-h100-2", up=False)
    first = ask(client, shape="h100.x4", duration="PT8H")
    engine_tick()
    engine_tick(advance=30)
    assert show(client, first)["servers"][0]["host"] == "gpu-h100-1"
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=False)
    assert show(client, first)["status"] == "queued"
    newer = ask(client, "nlp-lab", shape="h100.x4", duration="PT8H")
    assert newer["status"] == "queued"
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=True)
    assert show(client, first)["status"] in ("scheduled", "provisioning")
    assert show(client, newer, "nlp-lab")["status"] == "queued"
    engine_tick(advance=30)
    back = show(client, first)
    assert back["status"] == "active" and back["servers"][0]["host"] == "gpu-h100-1"


def gpu_hours(client, project="ml-vision"):
    reply = client.get("/v1/usage", headers=headers(project)).get_json()["usage"]["projects"]
    return {p["project_id"]: p["gpu_models"] for p in reply}[project]["A100"]["gpu_hours"]


def test_the_gpu_hours_used_on_a_host_that_went_down_still_count(client, runtime, cloud, engine_tick):
    """The move replaces the lease's allocations; what it used before counts in usage
    (and so in budgets and fair share), and its new hold counts from the move on."""
    lease = ask(client)
    engine_tick()
    engine_tick(advance=30)
    assert show(client, lease)["status"] == "active"
    started = runtime.clock.now() - 30
    runtime.clock.set(started + 2 * HOUR)
    lost = show(client, lease)["servers"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    moved_at = runtime.clock.now()
    engine_tick(advance=30)
    assert show(client, lease)["status"] == "active"
    runtime.clock.set(moved_at + HOUR)
    used_before = 8 * (moved_at - started) / HOUR
    assert gpu_hours(client) == round(used_before + 8 * 1.0, 4)   # 2 h and a bit, then 1 h on the new host


def test_a_lease_that_ran_again_after_a_rescue_has_its_attempts_again(client, runtime, cloud, engine_tick):
    """A failure class's attempts are those of one start: a lease that came back active after a
    rescue off a down host is rescued again the next time its host goes down, and the time after,
    however many hosts died under it over its life (the third was failed: its attempts counted
    every failure since its creation)."""
    lease = ask(client, duration="PT24H", volume={"size_gb": 10})
    engine_tick()
    engine_tick(advance=30)
    for time in range(4):
        running = show(client, lease)
        assert running["status"] == "active", (time, running["status"], running["failures"])
        lost = running["servers"][0]["host"]
        host_goes(runtime, cloud, engine_tick, lost, up=False)
        engine_tick(advance=30)
        engine_tick(advance=30)
        host_goes(runtime, cloud, engine_tick, lost, up=True)
        engine_tick(advance=3600)
    after = show(client, lease)
    assert after["status"] == "active" and after["end"] == running["end"]
    assert [(f["class"], f["action"], f["attempt"]) for f in after["failures"]] == [("host_down", "replaced", 1)] * 4


def test_a_lease_whose_time_is_up_when_its_host_goes_down_ends_rather_than_boot_again(
        client, runtime, cloud, engine_tick):
    """The pass that sees the host down comes just after the lease's end: it ends, as it would
    have on a live host. (The rescue, which runs before the pass's ends, re-placed it for the
    minute a re-placed lease is given at least, and booted its VMs again on other hosts.)"""
    lease = ask(client, duration="PT1H")
    engine_tick()
    engine_tick(advance=30)
    running = show(client, lease)
    assert running["status"] == "active"
    end, lost = parse_time(running["end"]), running["servers"][0]["host"]
    runtime.clock.set(end - runtime.config.host_refresh_seconds + 1)
    host_goes(runtime, cloud, engine_tick, lost, up=False)   # the pass one second after the end
    for _ in range(3):
        engine_tick(advance=10)
    after = show(client, lease)
    assert after["status"] == "ended" and after["failures"] == [], (after["status"], after["failures"])
    assert after["end"] == running["end"] and after["servers"][0]["id"] not in cloud.servers()
    assert not any(e["kind"] == "host_failure" for e in events(client, lease))


def test_a_rescued_vm_placed_where_its_own_old_vm_is_being_released_waits_for_it(client, runtime, cloud, engine_tick):
    """Three VMs of 4 A100: two on a host that goes down, one on a live host. Rescued, the one
    is placed again on its live host (its old VM there, deleted, still being released: the GPUs
    fit). The lease's class still had its one unit there taken by the old VM, so the boot was
    refused (no valid host, an attempt spent): it now waits for its own old VM's release, as for
    another lease's (edge property test, seed 14, step 311)."""
    lease = ask(client, shape="a100.x4", instances=3)
    engine_tick()
    engine_tick(advance=30)
    running = show(client, lease)
    assert running["status"] == "active"
    hosts = [s["host"] for s in running["servers"]]
    lost = max(set(hosts), key=hosts.count)   # the host of two of them
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    for _ in range(6):
        engine_tick(advance=10)
    after = show(client, lease)
    assert [(f["class"], f["action"]) for f in after["failures"]] == [("host_down", "replaced")], after["failures"]
    assert after["status"] == "active" and lost not in {s["host"] for s in after["servers"]}


def test_a_lease_that_ran_then_lost_its_host_waits_again_past_its_latest_start_and_is_not_expired(
        client, runtime, cloud, engine_tick):
    """A lease asked with a latest start ran, within it; hours later its host goes down and no
    other can take it now: it waits in the queue, first for the next host. Its latest start is
    long past, and the replan expired it ("its latest start passed before GPUs were free for
    it"): a lease that ran shown as one that never did, and never given its time back."""
    host_goes(runtime, cloud, engine_tick, "gpu-h100-2", up=False)
    now = runtime.clock.now()
    lease = ask(client, shape="h100.x4", duration="PT8H", latest_start=rfc3339(now + 600))
    engine_tick()
    engine_tick(advance=30)
    assert show(client, lease)["status"] == "active"
    runtime.clock.advance(2 * HOUR)
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=False)
    engine_tick(advance=10)
    waiting = show(client, lease)
    assert waiting["status"] == "queued", waiting["status"]
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=True)
    engine_tick(advance=30)
    back = show(client, lease)
    assert back["status"] == "active" and back["servers"][0]["host"] == "gpu-h100-1", back["status"]


def test_a_rescued_lease_waiting_for_a_host_does_not_rewrite_its_inventory_every_pass(
        client, runtime, cloud, engine_tick, monkeypatch):
    """Re-placed with no host free, a lease waits ahead of the queue; each pass plans it again
    alone. Its class's inventory was taken off its hosts when it was moved, and stays so while
    it waits: each pass asked the cloud again (on OpenStack, Placement calls per host every
    tick, for every such lease, for as long as it waits)."""
    host_goes(runtime, cloud, engine_tick, "gpu-h100-2", up=False)
    lease = ask(client, shape="h100.x4", duration="PT8H")
    engine_tick()
    engine_tick(advance=30)
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=False)
    assert show(client, lease)["status"] == "queued" and lease["id"] not in cloud.lease_inventory()
    calls = []
    real = cloud.set_lease_inventory
    monkeypatch.setattr(cloud, "set_lease_inventory", lambda *a: calls.append(a) or real(*a))
    for _ in range(5):
        engine_tick(advance=10)
    assert calls == [] and show(client, lease)["status"] == "queued"
    host_goes(runtime, cloud, engine_tick, "gpu-h100-1", up=True)   # placed: its inventory follows it
    assert show(client, lease)["status"] in ("scheduled", "provisioning")
    assert cloud.lease_inventory()[lease["id"]] == {"gpu-h100-1": 1}
