"""No GPU is booked twice at the edges of a lease: where one ends and the next begins.

Each test drives the demo's API and engine with the simulated cloud (boot 20 s,
delete 5 s) and the virtual clock, and checks that no lease is refused a host by
the cloud (no_valid_host), which is what a double booking looks like from the cloud."""
from __future__ import annotations

from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from tests.conftest import headers


def ask(client, body, project="ml-vision"):
    reply = client.post("/v1/leases", json=body, headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def get(client, lease_id, project="ml-vision"):
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]


def failures(sessions, lease_id):
    with session_scope(sessions) as s:
        return [(f.failure_class, f.message) for f in s.scalars(
            select(m.LeaseFailure).where(m.LeaseFailure.lease_id == lease_id))]


def hosts_of(sessions, lease_id):
    with session_scope(sessions) as s:
        return sorted({a.host for a in s.get(m.Lease, lease_id).allocations})


def test_ending_a_lease_in_the_second_it_began_provisioning_keeps_its_gpus_held(client, runtime, cloud,
                                                                               engine_tick):
    """Case 3: the lease's VM is booting on its GPUs; ending it then must not hand them on."""
    first = ask(client, {"shape": "h100.x4", "duration": "PT1H"})
    engine_tick()                                   # provisioning, its VM asked for, this same second
    assert get(client, first["id"])["status"] == "provisioning"
    host = hosts_of(runtime.sessions, first["id"])[0]
    assert client.delete(f"/v1/leases/{first['id']}", headers=headers()).status_code == 204
    assert cloud.free_gpus()[host] == 0             # the VM still holds them while it is deleted
    nxt = ask(client, {"shape": "h100.x4", "duration": "PT1H"}, project="nlp-lab")
    assert hosts_of(runtime.sessions, nxt["id"]) != [host]
    for _ in range(4):
        engine_tick(advance=10)
    assert get(client, nxt["id"], "nlp-lab")["status"] == "active"
    assert failures(runtime.sessions, nxt["id"]) == []


def current_allowance(runtime):
    from gpu_tenancy.engine import held
    with session_scope(runtime.sessions) as s:
        return held.allowance(s, runtime.planner_settings.release_floor)


def reservation_behind(client, runtime, engine_tick, duration: str):
    """Both H100 hosts' GPUs held by a lease of a minute (one of them `first`, started now) and a
    reservation of `duration` on `first`'s host from its end plus the release allowance: first,
    the reservation, the host, first's end and the reservation's start."""
    first = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    other = ask(client, {"shape": "h100.x4", "duration": "PT60S"}, project="nlp-lab")
    engine_tick()
    engine_tick(advance=20)
    assert get(client, first["id"])["status"] == get(client, other["id"], "nlp-lab")["status"] == "active"
    host = hosts_of(runtime.sessions, first["id"])[0]
    end = runtime.clock.now() - 20 + 60
    start = end + current_allowance(runtime)
    nxt = ask(client, {"shape": "h100.x4", "duration": duration, "start": time_text(start)})
    assert nxt["status"] == "scheduled" and hosts_of(runtime.sessions, nxt["id"]) == [host]
    return first, nxt, host, end, start


def test_a_reservation_waits_for_the_gpus_the_lease_before_it_still_holds(client, runtime, cloud, engine_tick):
    """Case 1: the reservation's start comes while the lease before it on the same GPUs is
    still being deleted (slower than planned): it waits for the release, then boots there,
    instead of being refused the host and retried elsewhere."""
    first, nxt, host, end, start = reservation_behind(client, runtime, engine_tick, "PT60S")
    cloud.slow_deletes(30, times=2)                # the VMs ending then take 30 s to go
    runtime.clock.set(end)
    engine_tick()
    runtime.clock.set(start)
    engine_tick()
    assert get(client, nxt["id"])["status"] == "scheduled"  # waits for the release
    assert get(client, first["id"])["status"] == "ending"
    while get(client, first["id"])["status"] == "ending":
        engine_tick(advance=1)
        runtime.engine.watch_once()
    released = runtime.clock.now()
    engine_tick()
    lease = get(client, nxt["id"])
    assert lease["status"] == "provisioning" and hosts_of(runtime.sessions, nxt["id"]) == [host]
    assert released == end + 30
    engine_tick(advance=20)
    assert get(client, nxt["id"])["status"] == "active"
    assert failures(runtime.sessions, nxt["id"]) == []
    events = client.get(f"/v1/leases/{nxt['id']}/events", headers=headers()).get_json()["events"]
    assert sum("to be released by the cloud" in e["message"] for e in events) == 1


def time_text(t):
    from gpu_tenancy.timeutil import rfc3339
    return rfc3339(t)


def test_a_lease_asked_during_a_tick_is_not_committed_onto_an_ending_leases_gpus(client, runtime, cloud,
                                                                                 engine_tick, monkeypatch):
    """Case 2: the tick ends a lease, and a lease asked for "now" a second later, while the tick
    runs, is planned by the tick's replan: not as a reservation on the GPUs still being
    released, and no event of it is stamped before it was asked for."""
    first = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    other = ask(client, {"shape": "h100.x4", "duration": "PT2H"}, project="nlp-lab")
    engine_tick()
    engine_tick(advance=20)
    host = hosts_of(runtime.sessions, first["id"])[0]
    lifecycle = runtime.engine.lifecycle
    asked = []
    real_finish = lifecycle.finish_end

    def finish_then_ask(lease_id):     # the API serves a request while the tick ends the lease
        real_finish(lease_id)
        if not asked:
            runtime.clock.advance(1)
            asked.append(ask(client, {"shape": "h100.x4", "duration": "PT60S"}, project="ml-vision"))
    monkeypatch.setattr(lifecycle, "finish_end", finish_then_ask)
    runtime.clock.advance(40)                   # the first lease's end
    engine_tick()
    monkeypatch.undo()
    nxt = asked[0]
    with session_scope(runtime.sessions) as s:
        row = s.get(m.Lease, nxt["id"])
        asked_at = row.created_at
        assert all(e.at >= asked_at for e in s.scalars(select(m.Event).where(m.Event.lease_id == row.id)))
        # while the first lease's VM is being deleted, nothing else is committed on its GPUs
        assert row.status == "queued" or host not in {a.host for a in row.allocations}
    assert get(client, first["id"])["status"] == "ending"
    for _ in range(10):
        engine_tick(advance=1)
        runtime.engine.watch_once()
    engine_tick(advance=20)
    assert get(client, nxt["id"])["status"] == "active"
    assert failures(runtime.sessions, nxt["id"]) == []
    assert get(client, other["id"], "nlp-lab")["status"] == "active"


def test_capacity_hosts_and_metrics_count_an_ending_leases_gpus_until_released(client, runtime, cloud,
                                                                               engine_tick):
    """Case 4: one notion of held: the GPUs of a lease whose VMs are being deleted are in use
    for /v1/capacity (figures and calendar), /v1/hosts and the metrics, as for the planner."""
    first = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    ask(client, {"shape": "h100.x4", "duration": "PT2H"}, project="nlp-lab")
    engine_tick()
    engine_tick(advance=20)
    host = hosts_of(runtime.sessions, first["id"])[0]
    cloud.slow_deletes(30)
    engine_tick(advance=40)                     # the first lease's end: its VM is being deleted
    assert get(client, first["id"])["status"] == "ending" and cloud.free_gpus()[host] == 0
    now = runtime.clock.now()
    admin = headers("admin-project", roles="admin")
    body = client.get("/v1/capacity", headers=admin, query_string={
        "start": time_text(now), "end": time_text(now + 3600)}).get_json()["capacity"]
    h100 = body["gpu_models"]["H100"]
    assert (h100["in_use"], h100["free"], h100["largest_free_block"]) == (8, 0, 0)
    row = next(h for h in body["calendar"] if h["host"] == host)
    assert row["free"][0] == {"from": time_text(now), "to": row["free"][0]["to"], "free": 0, "planned": 0}
    listed = {h["name"]: h for h in client.get("/v1/hosts", headers=admin).get_json()["hosts"]}
    assert listed[host]["in_use"] == 4 and listed[host]["held_until"] > time_text(now)
    metrics = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert 'gpu_tenancy_gpus_in_use{gpu_model="H100",project_id="ml-vision"} 4.0' in metrics
    waiting = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    assert waiting["status"] == "queued"
    while get(client, first["id"])["status"] == "ending":
        engine_tick(advance=1)
    body = client.get("/v1/capacity", headers=admin).get_json()["capacity"]
    assert body["gpu_models"]["H100"]["in_use"] == 8      # the waiting lease has them now
    assert get(client, waiting["id"])["status"] in ("scheduled", "provisioning")


def test_leases_asked_in_the_same_second_keep_the_order_they_were_asked_in(client, runtime, engine_tick,
                                                                           monkeypatch):
    """Case 6: arrival order, not the random lease id: of two leases one project asks one
    after the other in the same second, the first goes first."""
    from gpu_tenancy.engine import ledger
    for _ in range(2):
        ask(client, {"shape": "h100.x4", "duration": "PT2H"}, project="nlp-lab")   # both H100 hosts taken
    ids = iter(["ffffffff-0000-4000-8000-000000000000", "00000000-0000-4000-8000-000000000000"])
    monkeypatch.setattr(ledger, "new_lease_id", lambda: next(ids))   # the later asked has the lower id
    first = ask(client, {"shape": "h100.x4", "duration": "PT1H"})
    second = ask(client, {"shape": "h100.x4", "duration": "PT1H"})
    engine_tick()
    first, second = get(client, first["id"]), get(client, second["id"])
    assert (first["queue"]["position"], second["queue"]["position"]) == (1, 2)
    assert first["queue"]["eta"] < second["queue"]["eta"]


def started_at(client, lease_id, project):
    events = client.get(f"/v1/leases/{lease_id}/events", headers=headers(project)).get_json()["events"]
    return next(e["at"] for e in events if e["to"] == "provisioning")


def test_etas_down_a_chain_of_six_include_the_release_time(client, runtime, engine_tick, monkeypatch):
    """Case 5: six leases wait in a chain on one H100 host, each for the GPUs of the one
    before; each ETA, as told when it was asked, includes the cloud's release time, so the
    lateness does not grow down the chain (it grew by the 5 s delete at every step)."""
    from gpu_tenancy.timeutil import parse_time
    admin = headers("admin-project", roles="admin")
    assert client.patch("/v1/hosts/gpu-h100-2", json={"drained": True}, headers=admin).status_code == 200
    from gpu_tenancy.engine import ledger
    ids = (f"{i:08x}-0000-4000-8000-000000000000" for i in range(1, 100))
    monkeypatch.setattr(ledger, "new_lease_id", lambda: next(ids))   # ids in the order asked: this is not case 6
    projects = ["ml-vision", "nlp-lab"] * 4
    leases = [ask(client, {"shape": "h100.x4", "duration": "PT2M"}, project=p) for p in projects[:7]]
    assert [lease["status"] for lease in leases] == ["scheduled"] + ["queued"] * 6
    etas = [parse_time(lease["queue"]["eta"]) for lease in leases[1:]]
    for _ in range(7 * 130):
        engine_tick(advance=1)
    starts = [parse_time(started_at(client, lease["id"], p)) for lease, p in zip(leases[1:], projects[1:])]
    lateness = [s - e for s, e in zip(starts, etas)]
    print("lateness by depth 1-6 (s):", lateness)
    assert all(0 <= late <= 2 for late in lateness), lateness
    assert all(failures(runtime.sessions, lease["id"]) == [] for lease in leases)


def test_the_allowance_follows_the_clouds_measured_release_times(client, runtime, cloud, engine_tick):
    """Case 5: the engine measures each delete-to-release time; a cloud slower than it says
    makes the next ETAs include its real release time."""
    assert current_allowance(runtime) == 5          # the simulated cloud's own word
    cloud.slow_deletes(12, times=3)
    for project in ("ml-vision", "nlp-lab"):
        ask(client, {"shape": "h100.x4", "duration": "PT60S"}, project=project)
    engine_tick()
    for _ in range(90):
        engine_tick(advance=1)
    assert current_allowance(runtime) == 12
    running = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    waiting = ask(client, {"shape": "h100.x4", "duration": "PT60S"})
    from gpu_tenancy.timeutil import parse_time
    assert parse_time(waiting["queue"]["eta"]) == parse_time(running["end"]) + 12


def test_the_release_allowance_floor_is_checked():
    import pytest

    from gpu_tenancy.config import Config
    for bad in (-1, 1.5, True, 10 ** 6):
        with pytest.raises(ValueError, match="release_allowance_seconds"):
            Config.load(release_allowance_seconds=bad)


def test_a_gang_moved_off_a_down_host_waits_for_its_own_vm_still_being_released(client, runtime, cloud,
                                                                               engine_tick):
    """A gang of two loses one host; its VM on the other (up) host is deleted with it, and
    the cloud takes a few seconds to release that VM's GPUs. The gang is re-placed at once
    (onto that host: the only other free one is the fourth), and those GPUs stay held until
    the cloud confirms their release: its boot there waits for it instead of being refused
    the host (No valid host) and failing over again."""
    gang = ask(client, {"shape": "a100.x8", "instances": 2, "duration": "PT4H"})
    other = ask(client, {"shape": "a100.x8", "duration": "PT4H"}, project="nlp-lab")
    engine_tick()
    engine_tick(advance=30)
    assert get(client, gang["id"])["status"] == get(client, other["id"], "nlp-lab")["status"] == "active"
    lost, kept = hosts_of(runtime.sessions, gang["id"])
    busy = hosts_of(runtime.sessions, other["id"])
    [free] = sorted({"gpu-a100-1", "gpu-a100-2", "gpu-a100-3", "gpu-a100-4"} - {lost, kept, *busy})
    cloud.set_host_state(lost, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)   # the engine sees the host down and moves the gang
    assert hosts_of(runtime.sessions, gang["id"]) == sorted([kept, free])
    assert cloud.free_gpus()[kept] == 0        # its old VM there is still being released ...
    with session_scope(runtime.sessions) as s:  # ... and the ledger holds those GPUs
        from gpu_tenancy.engine import held
        now = runtime.clock.now()
        assert kept in {h.host for h in held.held_between(s, now, now, now + 1,
                                                           held.allowance(s, runtime.planner_settings.release_floor))
                        if h.lease_id != gang["id"]}
    for _ in range(8):
        engine_tick(advance=5)
        runtime.engine.watch_once()
    lease = get(client, gang["id"])
    assert lease["status"] == "active" and sorted(s["host"] for s in lease["servers"]) == sorted([kept, free])
    assert [c for c, _ in failures(runtime.sessions, gang["id"])] == ["host_down"]   # no boot refused
    with session_scope(runtime.sessions) as s:   # the release was seen and measured: nothing left held
        assert s.scalars(select(m.ReleasingGpus)).all() == []


def test_a_start_held_back_by_a_slow_release_boots_with_its_whole_boot_time(client, runtime, cloud, engine_tick):
    """The boot's time counts from when the lease began starting: a reservation that waited half
    an hour for the GPUs before it to be released is not failed boot_timeout on its first look."""
    first, nxt, host, end, start = reservation_behind(client, runtime, engine_tick, "PT2H")
    cloud.slow_deletes(runtime.config.boot_timeout_seconds + 60, times=2)
    runtime.clock.set(end)
    engine_tick()
    runtime.clock.set(start)
    engine_tick()
    assert get(client, nxt["id"])["status"] == "scheduled"     # waits for the release
    while get(client, first["id"])["status"] == "ending":
        engine_tick(advance=30)
    engine_tick()
    for _ in range(3):
        engine_tick(advance=30)
    assert get(client, nxt["id"])["status"] == "active" and failures(runtime.sessions, nxt["id"]) == []


def test_a_lease_due_while_the_engine_was_down_boots_when_it_is_back(client, runtime, cloud, engine_tick):
    lease = ask(client, {"shape": "a100.x1", "duration": "PT4H", "start": time_text(runtime.clock.now() + 600)})
    assert lease["status"] == "scheduled"
    runtime.clock.advance(600 + runtime.config.boot_timeout_seconds + 1)   # the engine was down 40 min
    engine_tick()
    engine_tick(advance=30)
    assert get(client, lease["id"])["status"] == "active" and failures(runtime.sessions, lease["id"]) == []


def test_a_lease_still_booting_past_its_end_holds_its_gpus_till_its_boot_deadline(client, runtime, cloud,
                                                                                   engine_tick):
    """A short lease whose boot hangs (its VM stays BUILD) is still provisioning after its end:
    its GPUs are not back before its boot fails, boot_timeout_seconds after it began, and its VM
    is deleted. A lease that needs them is planned from then (it was told the next second, and
    committed there, to wait for a release twenty minutes off)."""
    from gpu_tenancy.domain.failures import FailureClass
    from gpu_tenancy.timeutil import parse_time
    busy = ask(client, {"shape": "h100.x4", "duration": "P1D"})
    engine_tick()
    cloud.inject_failure("server_error", FailureClass.BOOT_TIMEOUT)   # the next boot: the short lease's
    began = runtime.clock.now()
    hung = ask(client, {"shape": "h100.x4", "duration": "PT10M"}, project="nlp-lab")
    engine_tick()
    assert get(client, hung["id"], "nlp-lab")["status"] == "provisioning"
    assert hosts_of(runtime.sessions, busy["id"]) != hosts_of(runtime.sessions, hung["id"])
    for _ in range(3):
        engine_tick(advance=300)   # fifteen minutes: five past its end, still booting
    story = client.get(f"/v1/leases/{hung['id']}/events", headers=headers("nlp-lab")).get_json()["events"]
    assert get(client, hung["id"], "nlp-lab")["status"] == "provisioning", "; ".join(e["message"] for e in story)
    after = ask(client, {"shape": "h100.x4", "duration": "PT1H"}, project="nlp-lab")
    deadline = began + runtime.config.boot_timeout_seconds
    told = after["queue"]["eta"] if after["status"] == "queued" else after["start"]
    assert parse_time(told) >= deadline, (after["status"], told, time_text(deadline))
