"""Failures: each injected fault lands in its named class; host-level faults are
retried on another host after a bounded backoff, user errors fail at once,
unknown is its own class and counted; the lease shows its failure history."""
from __future__ import annotations

import pytest

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.domain.failures import RULES, FailureClass, Retry, retry_delay
from gpu_tenancy.engine import retry
from gpu_tenancy.engine.lifecycle import Lifecycle
from tests.conftest import headers

F = FailureClass


def ask(client, **body):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", **body}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def show(client, lease_id, operator=False):
    """The lease as its project sees it, or as an operator (an admin), who sees the cloud's words too."""
    who = headers(roles="admin") if operator else headers()
    return client.get(f"/v1/leases/{lease_id}", headers=who).get_json()["lease"]


def metric(client, failure_class):
    for line in client.get("/metrics", headers=headers("ops", "admin")).get_data(as_text=True).splitlines():
        if line.startswith(f'gpu_tenancy_lease_failures_total{{failure_class="{failure_class}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_the_backoff_doubles_and_is_bounded():
    assert [retry_delay(F.API_ERROR, n, 30, 600) for n in (1, 2, 3)] == [30, 60, None]
    assert retry_delay(F.HOST_DOWN, 2, 500, 600) == 600
    assert all(retry_delay(c, 1) is None for c, r in RULES.items() if r.retry is Retry.NEVER)
    assert retry_delay(F.UNKNOWN, 1) is None and RULES[F.UNKNOWN].retry is Retry.NEVER


def test_a_host_level_fault_is_retried_on_another_host_after_the_backoff(client, runtime, cloud, engine_tick):
    cloud.inject_failure("server_error", F.NO_VALID_HOST)
    lease = ask(client, volume={"size_gb": 5})
    first_host = lease["allocations"][0]["host"]
    engine_tick()
    engine_tick(advance=30)                     # the VM went ERROR: retried, not failed
    shown = show(client, lease["id"])
    assert shown["status"] == "scheduled"
    [failure] = shown["failures"]
    assert (failure["class"], failure["action"], failure["attempt"], failure["hosts"]) == (
        "no_valid_host", "retried", 1, [first_host])
    assert failure["retry"] == "elsewhere" and "No valid host" not in failure["message"]   # the cloud's words:
    assert "No valid host" in show(client, lease["id"], operator=True)["failures"][0]["message"]   # operators'
    assert shown["allocations"][0]["host"] != first_host
    assert shown["start"] == failure["retry_at"]   # no sooner than the backoff
    assert cloud.servers() == {}                   # the failed VM is gone
    engine_tick(advance=runtime.config.retry_backoff_seconds)
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["status"] == "active" and shown["servers"][0]["host"] != first_host
    assert [v["status"] for v in cloud.volumes().values()] == ["in-use"]   # the same volume, attached
    assert metric(client, "no_valid_host") == 1


def test_a_delete_the_cloud_refuses_once_does_not_end_the_leases_tries(client, runtime, cloud, engine_tick):
    """The failed VM's delete refused once: the next pass deletes it and retries the lease
    elsewhere (it failed at once, on attempt 1 of 3, and nothing said why)."""
    cloud.inject_failure("server_error", F.NO_VALID_HOST)
    cloud.inject_failure("delete_server", F.API_ERROR)
    lease = ask(client)
    engine_tick()
    engine_tick(advance=30)
    assert show(client, lease["id"])["status"] == "provisioning"   # its VM still there, in ERROR
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["status"] == "scheduled" and [f["action"] for f in shown["failures"]] == ["retried"], shown
    engine_tick(advance=runtime.config.retry_backoff_seconds)
    engine_tick(advance=30)
    assert show(client, lease["id"])["status"] == "active"


class Stopped(BaseException):
    """The engine's process killed: nothing catches it, the transaction in flight is lost."""


def test_a_retry_the_engine_stopped_in_after_its_delete_is_tried_again_after_a_restart(client, runtime, cloud,
                                                                                          engine_tick, monkeypatch):
    """Stopped between the failed VM's delete and the re-placement's commit: after a restart the
    lease's recorded VM is gone, which is retried elsewhere (it failed at once as unknown)."""
    cloud.inject_failure("server_error", F.NO_VALID_HOST)
    lease = ask(client)
    engine_tick()

    def stop(*args, **kwargs):
        raise Stopped("after the delete, before the commit")
    monkeypatch.setattr(retry, "replace", stop)
    with pytest.raises(Stopped):
        engine_tick(advance=30)
    monkeypatch.undo()
    assert cloud.servers() == {}
    restarted = Lifecycle(runtime.sessions, cloud, runtime.clock, runtime.config)   # the engine's next process
    restarted.tick()
    shown = show(client, lease["id"])
    assert shown["status"] == "scheduled", shown["status"]
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("api_error", "retried")], shown["failures"]
    runtime.clock.advance(runtime.config.retry_backoff_seconds)
    restarted.tick()
    runtime.clock.advance(30)
    restarted.tick()
    assert show(client, lease["id"])["status"] == "active"


def test_retries_stop_after_the_classes_attempts(client, runtime, cloud, engine_tick):
    cloud.inject_failure("server_error", F.NO_VALID_HOST, times=10)
    lease = ask(client)
    engine_tick()
    for _ in range(3):
        engine_tick(advance=30)
        engine_tick(advance=runtime.config.retry_backoff_max_seconds)
    shown = show(client, lease["id"])
    assert shown["status"] == "failed"
    assert [(f["attempt"], f["action"]) for f in shown["failures"]] == [(1, "retried"), (2, "retried"), (3, "failed")]
    starts = [f["retry_at"] for f in shown["failures"][:2]]
    gaps = [shown["failures"][i]["at"] for i in range(2)]
    assert starts[0] > gaps[0] and starts[1] > gaps[1]
    assert len({h for f in shown["failures"] for h in f["hosts"]}) == 3   # a new host each time
    assert cloud.servers() == {}


@pytest.mark.parametrize("failure_class", [c for c in F if c not in (F.INTERNAL, F.UNKNOWN)])
def test_every_injected_fault_lands_in_its_class_with_its_retry_rule(client, cloud, engine_tick, failure_class):
    cloud.inject_failure("boot", failure_class)
    lease = ask(client)
    engine_tick()
    shown = show(client, lease["id"])
    [failure] = shown["failures"]
    assert failure["class"] == failure_class.value
    if RULES[failure_class].retry is Retry.ELSEWHERE:
        assert (shown["status"], failure["action"]) == ("scheduled", "retried")
    else:   # the user's or the operator's to fix: failed at once, no second boot
        assert (shown["status"], failure["action"]) == ("failed", "failed")
        assert shown["failure"]["class"] == failure_class.value
    assert failure["user_message"] and failure["operator_hint"]
    assert metric(client, failure_class.value) == 1


def test_an_unknown_fault_is_its_own_class_fails_at_once_and_is_counted(client, cloud, engine_tick):
    cloud.inject_failure("server_error", F.UNKNOWN, message="the hypervisor sang a song")
    lease = ask(client)
    engine_tick()
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["status"] in ("ending", "failed")
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("unknown", "failed")]
    assert "sang a song" not in shown["failures"][0]["message"]
    assert "sang a song" in show(client, lease["id"], operator=True)["failures"][0]["message"]
    assert metric(client, "unknown") == 1


def test_an_internal_error_is_classified_not_raised(client, runtime, engine_tick, monkeypatch):
    lease = ask(client)
    monkeypatch.setattr(runtime.cloud, "ensure_lease_flavor", lambda *a: 1 / 0)
    engine_tick()
    shown = show(client, lease["id"])
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("internal", "failed")]


def test_a_cloud_that_does_not_answer_while_a_vm_boots_does_not_cost_the_lease_its_vm(
        client, runtime, cloud, engine_tick, monkeypatch):
    """Reading a booting VM's state failed once (the compute API restarting: a 503). That is
    not a failed attempt: the VM boots on. It was taken for one, and the VM deleted and the
    lease re-placed after the backoff, an attempt spent (three such blips in a boot failed it)."""
    lease = ask(client)
    engine_tick()
    [server] = cloud.servers()
    real = cloud.server_state

    def unavailable(server_id):
        raise CloudError(F.API_ERROR, f"reading server {server_id} failed", "Service Unavailable (HTTP 503)")
    monkeypatch.setattr(cloud, "server_state", unavailable)
    engine_tick(advance=10)
    monkeypatch.setattr(cloud, "server_state", real)
    shown = show(client, lease["id"])
    assert shown["status"] == "provisioning" and shown["failures"] == [], (shown["status"], shown["failures"])
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["status"] == "active" and shown["servers"][0]["id"] == server


def test_a_cloud_that_never_answers_while_a_vm_boots_times_the_boot_out(client, runtime, cloud, engine_tick,
                                                                       monkeypatch):
    lease = ask(client)
    engine_tick()

    def unavailable(server_id):
        raise CloudError(F.API_ERROR, f"reading server {server_id} failed", "Service Unavailable (HTTP 503)")
    monkeypatch.setattr(cloud, "server_state", unavailable)
    engine_tick(advance=runtime.config.boot_timeout_seconds + 1)
    shown = show(client, lease["id"])
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("boot_timeout", "retried")], shown["failures"]


@pytest.mark.parametrize("step", ["attach_volume", "ensure_floating_ip", "grant_lease_flavor"])
def test_a_cloud_api_blip_after_the_vms_are_active_does_not_cost_the_lease_its_vms(client, runtime, cloud,
                                                                                   engine_tick, step):
    """The VM booted, then a step after it failed with a 500 (the data volume's attach, the
    floating IP, the flavor's grant): the API's blip, not a failed attempt. It was taken for one:
    the booted VM deleted, the lease re-placed after the backoff, one of its three attempts spent
    (three such blips failed a lease whose VMs booted every time). The step is tried again at the
    next pass, the VM kept."""
    lease = ask(client, volume={"size_gb": 5}, floating_ip=True)
    engine_tick()
    [server] = cloud.servers()
    cloud.inject_failure(step, F.API_ERROR)
    engine_tick(advance=30)                      # ACTIVE: the step after it fails once
    shown = show(client, lease["id"])
    assert shown["status"] == "provisioning" and shown["failures"] == [], (shown["status"], shown["failures"])
    assert list(cloud.servers()) == [server]
    engine_tick(advance=5)
    shown = show(client, lease["id"])
    assert shown["status"] == "active" and shown["failures"] == [] and shown["servers"][0]["id"] == server
    assert [v["status"] for v in cloud.volumes().values()] == ["in-use"]
    assert len(cloud.floating_ips()) == 1


def test_a_step_after_the_vms_are_active_that_keeps_failing_is_an_attempt_after_the_boot_timeout(
        client, runtime, cloud, engine_tick):
    lease = ask(client, volume={"size_gb": 5})
    engine_tick()
    cloud.inject_failure("attach_volume", F.API_ERROR, times=1000)
    engine_tick(advance=30)
    assert show(client, lease["id"])["failures"] == []
    engine_tick(advance=runtime.config.boot_timeout_seconds + 1)
    shown = show(client, lease["id"])
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("api_error", "retried")], shown["failures"]


def test_a_step_after_the_vms_are_active_the_user_must_fix_still_fails_at_once(client, cloud, engine_tick):
    """Not a blip: the cloud said the volume cannot be attached (another server's, gone)."""
    lease = ask(client, volume={"size_gb": 5})
    engine_tick()
    cloud.inject_failure("attach_volume", F.VOLUME)
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert [(f["class"], f["action"]) for f in shown["failures"]] == [("volume", "failed")], shown["failures"]
