"""A resume the cloud refuses or fails for a reason of the host's or its own (engine/resume.py:
retry_resume): tried again elsewhere within the failure class's attempts, as a boot is
(engine/retry.py). VMs still shelved: the slot moves and the lease is parked again, its VMs
and volume as they were. A VM that left the shelf and failed: the lease is booted again
elsewhere with its data volume, as a lease whose boot failed is."""
from __future__ import annotations

import dataclasses

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.timeutil import parse_time
from tests.conftest import headers
from tests.functional.test_host_failure import host_goes
from tests.functional.test_idle_rules import lease_of
from tests.functional.test_park import config, events, holds_at_every_instant, parked, running  # noqa: F401
from tests.functional.test_park_hosts import notices, other_h100, slot


def until(runtime, engine_tick, at: int) -> None:
    while runtime.clock.now() < at:
        engine_tick(advance=min(600, at - runtime.clock.now()))


def other_host_free(client, engine_tick, parked) -> None:
    """nlp-lab's busy lease on the other H100 host ended: it can take the idle lease at once."""
    assert client.delete(f"/v1/leases/{parked['busy']}", headers=headers("nlp-lab")).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)


def slot_comes(client, runtime, engine_tick, lease_id: str) -> None:
    """Ticks to the held slot's start, then 10 s ones until the resume has been tried (the GPUs
    of the lease before it on the slot's host are released a few seconds after its end)."""
    lease = lease_of(client, lease_id)
    tried = len(lease["failures"])
    until(runtime, engine_tick, slot(lease)[1])
    for _ in range(6):
        lease = lease_of(client, lease_id)
        if lease["status"] != "parked" or len(lease["failures"]) > tried:
            return
        engine_tick(advance=10)


def failures(lease) -> list[tuple[str, str, list[str]]]:
    return [(f["class"], f["action"], f["hosts"]) for f in lease["failures"]]


def test_an_unshelve_refused_by_a_host_down_since_the_last_refresh_moves_the_slot_and_resumes_elsewhere(
        client, runtime, engine_tick, cloud, parked):
    """The host goes down between the engine's looks at the hosts and the slot comes in that
    gap: the cloud says no valid host. The lease is parked again, its VM, disk and volume as they
    were, its slot moved off that host from the retry's backoff on; then it resumes there."""
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    [host], resume_by = slot(lease_of(client, idle))
    remaining = lease_of(client, idle)["park"]["remaining"]
    until(runtime, engine_tick, resume_by - 10)
    runtime.engine.lifecycle.refresh_hosts()   # its last look at the hosts: all up
    cloud.set_host_state(host, up=False)       # and down before the next one
    slot_comes(client, runtime, engine_tick, idle)
    assert runtime.clock.now() - resume_by < runtime.config.host_refresh_seconds - 10   # not seen down yet
    lease = lease_of(client, idle)
    assert lease["status"] == "parked" and lease["failure"] is None, lease["status"]
    assert failures(lease) == [("no_valid_host", "retried", [host])]
    hosts, again = slot(lease)
    now = runtime.clock.now()
    assert hosts == {other_h100(host)} and again >= now + runtime.config.retry_backoff_seconds
    assert parse_time(lease["end"]) - again == remaining == lease["park"]["remaining"]   # its time left, whole
    assert cloud.servers()[server]["status"] == "SHELVED_OFFLOADED"   # kept, disk and all
    assert idle not in cloud.lease_inventory()                         # no unit of its class till its slot
    told = [e["message"] for e in events(client, idle) if e["kind"] == "failure"]
    assert len(told) == 1 and host in told[0] and "Attempt 1 of 3" in told[0], told
    assert [e["to"] for e in events(client, idle) if e["to"]][-2:] == ["resuming", "parked"]
    event, body = notices(runtime, idle)[-1]
    assert event == "lease.parked" and parse_time(body["lease"]["resume_by"]) == again
    holds_at_every_instant(runtime)
    until(runtime, engine_tick, again)
    for _ in range(4):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active" and [(s["id"], s["host"]) for s in back["servers"]] == [
        (server, other_h100(host))]
    assert cloud.volumes()[parked["volume"]]["attached_to"] == server
    holds_at_every_instant(runtime)


def test_an_unshelve_the_cloud_keeps_refusing_fails_the_lease_after_its_class_attempts(
        client, runtime, engine_tick, cloud, parked):
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    cloud.inject_failure("unshelve", F.NO_VALID_HOST, times=10_000)
    for attempt in (1, 2, 3):
        lease = lease_of(client, idle)
        assert lease["status"] == "parked" and len(lease["failures"]) == attempt - 1, (attempt, lease["status"])
        slot_comes(client, runtime, engine_tick, idle)
    for _ in range(3):
        engine_tick(advance=10)
    lease = lease_of(client, idle)
    assert lease["status"] == "failed" and lease["failure"]["class"] == "no_valid_host", lease["status"]
    assert [(f["attempt"], f["action"]) for f in lease["failures"]] == [(1, "retried"), (2, "retried"), (3, "failed")]
    told = [e["message"] for e in events(client, idle) if e["kind"] == "failure"]
    assert len(told) == 3 and told[-1].startswith("no_valid_host: "), told
    assert server not in cloud.servers()
    assert cloud.volumes()[parked["volume"]]["status"] == "available"
    holds_at_every_instant(runtime)


def test_a_vm_in_error_on_unshelve_is_booted_again_elsewhere_with_its_volume(client, runtime, engine_tick, cloud,
                                                                            parked):
    """Its VM left the shelf and failed on the host: it cannot be unshelved again. The lease is
    booted again on another host with the same data volume and the time it had left, as a lease
    whose boot failed is; no VM of it is left behind."""
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    [host], resume_by = slot(lease_of(client, idle))
    remaining = lease_of(client, idle)["park"]["remaining"]
    cloud.inject_failure("unshelve_error", F.NO_VALID_HOST)
    slot_comes(client, runtime, engine_tick, idle)
    for _ in range(3):
        engine_tick(advance=10)   # unshelved, then ERROR once the simulated boot time is over
    lease = lease_of(client, idle)
    assert lease["status"] in ("scheduled", "provisioning", "active"), lease["status"]
    assert failures(lease) == [("no_valid_host", "retried", [host])]
    assert lease["park"] is None and {a["host"] for a in lease["allocations"]} == {other_h100(host)}
    assert server not in cloud.servers()
    told = [e["message"] for e in events(client, idle) if e["kind"] == "failure"]
    assert len(told) == 1 and "booted again" in told[0], told
    for _ in range(8):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active", back["status"]
    [vm] = back["servers"]
    assert vm["id"] != server and vm["host"] == other_h100(host)
    assert cloud.volumes()[parked["volume"]]["attached_to"] == vm["id"]
    assert parse_time(back["end"]) - parse_time(back["start"]) == remaining
    assert [s for s in cloud.servers().values() if s["lease_id"] == idle] == [cloud.servers()[vm["id"]]]
    holds_at_every_instant(runtime)
    # the project's webhook was told it parked: it is told it is back (booted again, not unshelved)
    told = notices(runtime, idle)
    assert [event for event, _ in told] == ["lease.idle", "lease.parked", "lease.resumed"], told
    assert told[-1][1]["lease"]["status"] == "active" and "booted again" in told[-1][1]["message"], told[-1]


def test_an_unshelve_the_cloud_accepts_then_gives_up_is_tried_again_elsewhere(client, runtime, engine_tick, cloud,
                                                                             parked, monkeypatch):
    """Nova answers a pinned unshelve at once and schedules it after: one it cannot place
    (no valid host) puts the VM back on the shelf, SHELVED_OFFLOADED with no task, and says no
    more. That is a refusal, not an unshelve still under way for boot_timeout_seconds."""
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    [host], _ = slot(lease_of(client, idle))
    unshelve, server_state, asked = cloud.unshelve, cloud.server_state, {}

    def accepted(server_id: str, on: str) -> None:   # the first one; then as the cloud does
        if asked:
            return unshelve(server_id, on)
        asked[server_id] = (on, runtime.clock.now())

    def state(server_id: str):   # Nova's task on it until it gives up, a few seconds later
        seen = server_state(server_id)
        if server_id in asked and runtime.clock.now() < asked[server_id][1] + 5:
            return dataclasses.replace(seen, task="unshelving")
        return seen
    monkeypatch.setattr(cloud, "unshelve", accepted)
    monkeypatch.setattr(cloud, "server_state", state)
    slot_comes(client, runtime, engine_tick, idle)
    assert lease_of(client, idle)["status"] == "resuming" and [on for on, _ in asked.values()] == [host]
    engine_tick(advance=10)   # the VM is back on the shelf, no task: given up
    lease = lease_of(client, idle)
    assert lease["status"] == "parked" and failures(lease) == [("no_valid_host", "retried", [host])], lease["status"]
    hosts, again = slot(lease)
    assert hosts == {other_h100(host)}
    until(runtime, engine_tick, again)
    for _ in range(4):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active" and [(s["id"], s["host"]) for s in back["servers"]] == [
        (server, other_h100(host))]


def test_a_lease_whose_host_dies_mid_unshelve_is_booted_again_on_another_host(client, runtime, engine_tick, cloud,
                                                                             parked):
    """Its VM was unshelved onto the host, which died before the VM was ACTIVE (nothing there
    spawns it: it stays BUILD). The VM is off the shelf, its disk on a dead host: the lease is
    re-placed as a lease booting or running there is (host_failure.rescue), booted again on
    another host with its data volume and the time it had left, rather than wait out
    boot_timeout_seconds and fail."""
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    [host], _ = slot(lease_of(client, idle))
    remaining = lease_of(client, idle)["park"]["remaining"]
    cloud.inject_failure("unshelve_error", F.BOOT_TIMEOUT)
    slot_comes(client, runtime, engine_tick, idle)
    assert lease_of(client, idle)["status"] == "resuming"
    host_goes(runtime, cloud, engine_tick, host, up=False)
    lease = lease_of(client, idle)
    assert lease["status"] in ("scheduled", "provisioning"), lease["status"]
    assert failures(lease) == [("host_down", "replaced", [host])]
    assert lease["park"] is None and {a["host"] for a in lease["allocations"]} == {other_h100(host)}
    assert server not in cloud.servers()
    told = [e["message"] for e in events(client, idle) if e["kind"] == "host_failure"]
    assert len(told) == 1 and host in told[0] and "booted again" in told[0], told
    for _ in range(6):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active", back["status"]
    [vm] = back["servers"]
    assert vm["id"] != server and vm["host"] == other_h100(host)
    assert cloud.volumes()[parked["volume"]]["attached_to"] == vm["id"]
    assert parse_time(back["end"]) - parse_time(back["start"]) == remaining
    holds_at_every_instant(runtime)


def test_a_lease_resuming_with_its_vms_still_shelved_when_its_host_goes_down_is_parked_again_elsewhere(
        client, runtime, engine_tick, cloud, parked):
    """Held up before any unshelve (the cloud refused its class's unit there for a while), its
    host seen down: nothing of it is on that host, so its slot moves at once, VMs kept."""
    idle, server = parked["idle"], parked["before"]["servers"][0]["id"]
    other_host_free(client, engine_tick, parked)
    [host], _ = slot(lease_of(client, idle))
    cloud.inject_failure("set_lease_inventory", F.API_ERROR, times=2)   # the tick's two looks at it
    slot_comes(client, runtime, engine_tick, idle)
    assert lease_of(client, idle)["status"] == "resuming"
    assert cloud.servers()[server]["status"] == "SHELVED_OFFLOADED"
    host_goes(runtime, cloud, engine_tick, host, up=False)
    lease = lease_of(client, idle)
    assert failures(lease) == [("host_down", "retried", [host])]
    # parked again with its slot from now on the other host (a host seen down: no backoff), and so
    # resuming there in the same pass
    assert [e["to"] for e in events(client, idle) if e["to"]][-3:] == ["resuming", "parked", "resuming"]
    assert lease["status"] == "resuming" and [(a["host"], parse_time(a["start"])) for a in lease["allocations"]] == [
        (other_h100(host), runtime.clock.now())]
    for _ in range(4):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active" and [(s["id"], s["host"]) for s in back["servers"]] == [
        (server, other_h100(host))]
    holds_at_every_instant(runtime)


def before_end_warnings(client, lease_id: str) -> int:
    return sum(1 for e in events(client, lease_id) if e["kind"] == "warning" and "the lease ends at" in e["message"])


def test_a_lease_booted_again_after_its_resume_failed_is_warned_again_before_its_new_end(
        client, runtime, engine_tick, cloud, parked):
    """Warned before its end, then parked: a resume that fails off the shelf boots it again with
    the time it had left, and it ends then. Its warning was for the end before the park; the
    lease was booted again without it cleared, and ended with no warning before its new end."""
    idle = parked["idle"]
    lead = runtime.config.warn_before_end_seconds
    with session_scope(runtime.sessions) as session:   # warned before it parked (as a lease of an hour is)
        session.get_one(m.Lease, idle).warned_at = utcnow_naive(runtime.clock.now())
    other_host_free(client, engine_tick, parked)
    cloud.inject_failure("unshelve_error", F.NO_VALID_HOST)
    slot_comes(client, runtime, engine_tick, idle)
    for _ in range(11):
        engine_tick(advance=10)
    back = lease_of(client, idle)
    assert back["status"] == "active" and failures(back)[0][1] == "retried", back["status"]
    warned = before_end_warnings(client, idle)
    until(runtime, engine_tick, parse_time(back["end"]) - lead + 60)
    engine_tick()
    assert before_end_warnings(client, idle) == warned + 1
