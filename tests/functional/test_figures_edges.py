"""The owners' and operators' figures (/metrics, the admin figures) on the edges of a
lease's life: re-placed after a failed boot or a host that went down, parked, cancelled."""
from __future__ import annotations

from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.engine import reports
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers
from tests.functional.test_host_failure import ask, host_goes, show
from tests.functional.test_metrics import scrape, value

HOUR = 3600
DAY = 86400


def waited_two_hours_then_rescued(client, runtime, cloud, clock, engine_tick) -> tuple[dict, dict]:
    """A lease waits two hours behind the whole A100 pool, starts at its ETA, runs ten hours,
    then its host goes down and it is moved to another host. The scrape before the move, and
    the lease."""
    ask(client, "ml-vision", instances=2, duration="PT2H")
    ask(client, "nlp-lab", instances=2, duration="PT3H")
    engine_tick()
    waiting = ask(client, "ml-vision", duration="PT24H")
    assert waiting["status"] == "queued" and waiting["queue"]["eta"]
    engine_tick(advance=2 * HOUR - 60)
    for _ in range(6):
        engine_tick(advance=60)
        if show(client, waiting)["status"] == "active":
            break
    assert show(client, waiting)["status"] == "active"
    before = scrape(client)
    engine_tick(advance=10 * HOUR)
    lost = show(client, waiting)["servers"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    engine_tick(advance=30)
    moved = show(client, waiting)
    assert moved["status"] == "active" and moved["servers"][0]["host"] != lost
    return before, moved


def test_a_lease_rescued_off_a_down_host_keeps_the_eta_it_started_by(client, runtime, cloud, clock, engine_tick):
    """It kept its ETA when it started; its host failing ten hours later breaks no promise
    (the figures read its committed start, which the move set ten hours later)."""
    t0 = clock.now()
    before, _ = waited_two_hours_then_rescued(client, runtime, cloud, clock, engine_tick)
    assert value(before, "gpu_tenancy_eta_kept_ratio") == 1.0
    after = scrape(client)
    assert value(after, "gpu_tenancy_eta_kept_ratio") == 1.0
    assert value(after, "gpu_tenancy_eta_lateness_seconds_bucket", gpu_model="A100", le="600.0") == 1
    assert value(after, "gpu_tenancy_eta_lateness_seconds_sum", gpu_model="A100") == value(
        before, "gpu_tenancy_eta_lateness_seconds_sum", gpu_model="A100")
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now(), clock.now(), 0)
    assert [(r["leases"], r["kept"], r["p90_lateness_seconds"] <= 600) for r in figures["eta_kept"]] == [(1, 1, True)]


def test_a_lease_rescued_off_a_down_host_keeps_the_wait_it_had(client, runtime, cloud, clock, engine_tick):
    """It waited two hours, once: the wait histogram's sum (a counter) must not go down, and
    the admin figures' P90 wait still counts the two hours."""
    t0 = clock.now()
    before, _ = waited_two_hours_then_rescued(client, runtime, cloud, clock, engine_tick)
    waited = value(before, "gpu_tenancy_admission_wait_time_seconds_sum", gpu_model="A100")
    assert waited >= 2 * HOUR - 120
    after = scrape(client)
    assert value(after, "gpu_tenancy_admission_wait_time_seconds_sum", gpu_model="A100") >= waited
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now(), clock.now(), 0)
    assert max(r["p90_wait_seconds"] for r in figures["wait_by_day"]) >= 2 * HOUR - 120


def test_a_first_boot_whose_host_went_down_and_waits_again_is_a_first_try_failure(client, runtime, cloud, clock,
                                                                                      engine_tick):
    """One H100 host is down; the other goes down while the lease's first boot is under way,
    and no host can take it now: it waits in the queue again. Its first try did not succeed
    (had the other host been up, it would be re-placed there, scheduled, and counted so)."""
    t0 = clock.now()
    ok = ask(client, shape="a100.x1", duration="PT1H")                 # a first try that works
    engine_tick()
    engine_tick(advance=30)
    assert show(client, ok)["status"] == "active"
    cloud.set_host_state("gpu-h100-2", up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    lease = ask(client, shape="h100.x4", duration="PT1H")
    engine_tick()
    assert show(client, lease)["status"] == "provisioning"
    cloud.set_host_state("gpu-h100-1", up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    shown = show(client, lease)
    assert shown["status"] == "queued" and [f["action"] for f in shown["failures"]] == ["replaced"]
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now() + HOUR, clock.now(), 0)
    assert figures["first_try_success"] == [
        {"day": "2026-12-01", "attempts": 2, "first_try_active": 1, "share": 0.5}], figures["first_try_success"]


def test_a_failed_boot_does_not_take_gpu_hours_back_from_the_allocated_counter(client, runtime, cloud, clock,
                                                                              engine_tick):
    """gpu_tenancy_gpu_hours_allocated_total is a counter: a scrape while a lease boots counts
    the GPUs it holds; its boot failing (and the lease re-placed) must not take them back, or
    Prometheus reads a counter reset and rate() jumps by the whole total."""
    ask(client, "ml-vision", shape="a100.x1", duration="PT8H")
    engine_tick()
    engine_tick(advance=30)
    clock.advance(HOUR)
    cloud.inject_failure("server_error", FailureClass.NO_VALID_HOST)
    booting = ask(client, "ml-vision", instances=2, duration="PT4H")
    engine_tick()
    assert show(client, booting)["status"] == "provisioning"
    clock.advance(20)
    before = value(scrape(client), "gpu_tenancy_gpu_hours_allocated_total", gpu_model="A100", project_id="ml-vision")
    engine_tick(advance=10)
    assert show(client, booting)["status"] == "scheduled"      # retried elsewhere
    after = value(scrape(client), "gpu_tenancy_gpu_hours_allocated_total", gpu_model="A100", project_id="ml-vision")
    assert after >= before, (before, after)


def test_a_first_boot_that_fails_for_good_is_a_first_try_failure(client, runtime, cloud, clock, engine_tick):
    """A boot the engine fails (a class it does not retry: here the image) goes provisioning ->
    ending -> failed, never provisioning -> failed: it was counted on neither side, as an owner's
    cancel while booting is, and the share of first tries that worked read too high."""
    t0 = clock.now()
    ok = ask(client, shape="a100.x1", duration="PT1H")
    engine_tick()
    engine_tick(advance=30)
    assert show(client, ok)["status"] == "active"
    cloud.inject_failure("check_image", FailureClass.IMAGE)
    failed = ask(client, shape="a100.x1", duration="PT1H")
    engine_tick()
    assert show(client, failed)["status"] in ("ending", "failed")
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now() + HOUR, clock.now(), 0)
    assert figures["first_try_success"] == [
        {"day": "2026-12-01", "attempts": 2, "first_try_active": 1, "share": 0.5}], figures["first_try_success"]
    engine_tick(advance=30)   # its end done: failed, and still counted so
    assert show(client, failed)["status"] == "failed"
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now() + HOUR, clock.now(), 0)
    assert figures["first_try_success"][0]["attempts"] == 2


def test_a_lease_its_owner_ends_while_it_boots_is_no_first_try(client, runtime, cloud, clock, engine_tick):
    t0 = clock.now()
    lease = ask(client, shape="a100.x1", duration="PT1H")
    engine_tick()
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code in (200, 202, 204)
    engine_tick()
    engine_tick(advance=30)
    assert show(client, lease)["status"] == "ended"
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, clock.now() + HOUR, clock.now(), 0)
    assert figures["first_try_success"] == [], figures["first_try_success"]


def test_a_lease_booked_ahead_counts_in_the_waits_when_it_starts_never_if_it_does_not(client, runtime, cloud, clock,
                                                                                        engine_tick):
    """A lease booked for six hours from now has not started: it is no observation of the wait
    histogram (a counter) yet. Counted at its booking, it was taken back when its hosts went
    down and it waited again with no start (the count went 1 -> 0: Prometheus reads a reset),
    and a lease cancelled before its start stayed a wait forever (P50/P90 of leases that never ran)."""
    t0 = clock.now()
    later = ask(client, shape="h100.x4", duration="PT1H", start=rfc3339(t0 + 6 * HOUR))
    cancelled = ask(client, shape="a100.x1", duration="PT1H", start=rfc3339(t0 + 6 * HOUR))
    assert later["status"] == cancelled["status"] == "scheduled"
    engine_tick()
    counts = [value(scrape(client), "gpu_tenancy_admission_wait_time_seconds_count", gpu_model=model)
              for model in ("A100", "H100")]
    assert counts == [0, 0], counts
    assert client.delete(f"/v1/leases/{cancelled['id']}", headers=headers()).status_code in (200, 202, 204)
    for host in ("gpu-h100-1", "gpu-h100-2"):
        cloud.set_host_state(host, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    assert show(client, later)["status"] == "queued" and show(client, cancelled)["status"] == "cancelled"
    samples = scrape(client)
    counts = [value(samples, "gpu_tenancy_admission_wait_time_seconds_count", gpu_model=model)
              for model in ("A100", "H100")]
    assert counts == [0, 0], counts
    with session_scope(runtime.sessions) as session:
        figures = reports.all_figures(session, t0 - HOUR, t0 + DAY, clock.now(), 0)
    assert figures["wait_by_day"] == [], figures["wait_by_day"]
