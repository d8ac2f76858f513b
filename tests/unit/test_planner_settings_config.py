"""The planner's options (the wait bound, the fair-share half-life, the least release
allowance) are configuration options that reach the service's planner runs: read once
from the config (planner_settings.from_config) and passed explicitly, never global."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import DEFAULT_WAIT_BOUND
from gpu_tenancy.engine import ledger, planner_settings

NOW = 1_800_000_000
H = 3600
M = "A100"


def inputs():
    q = {(p, M): QuotaLimit(p, M, 8) for p in ("heavy", "light")}
    waiting = [LeaseRequest("big", "heavy", M, 8, 1, H, NOW - 2 * H, None, NOW - 2 * H),
               LeaseRequest("small", "light", M, 8, 1, H, NOW - 60, None, NOW - 60)]
    return ledger.PlannerInputs([Host("h1", M, 8)], [], q, waiting, {("heavy", M): 900.0})


def test_default_is_the_planners():
    assert Config().planner_wait_bound_seconds == DEFAULT_WAIT_BOUND
    assert planner_settings.from_config(Config()).wait_bound == DEFAULT_WAIT_BOUND


def test_half_life_and_release_floor_come_from_the_config():
    settings = planner_settings.from_config(Config.load(fairshare_half_life_seconds=77,
                                                        release_allowance_seconds=30))
    assert (settings.fairshare_half_life, settings.release_floor) == (77, 30)
    assert planner_settings.from_config(Config()).fairshare_half_life == Config().fairshare_half_life_seconds


def test_configured_bound_changes_the_service_order():
    # by default fair share alone: the light tenant first
    assert list(ledger.run_planner(inputs(), NOW, planner_settings.from_config(Config())).leases) == ["small", "big"]
    bound = planner_settings.from_config(Config.load(planner_wait_bound_seconds=H))
    assert list(ledger.run_planner(inputs(), NOW, bound).leases) == ["big", "small"]


def test_null_turns_it_off(monkeypatch, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("planner_wait_bound_seconds: null\n")
    assert planner_settings.from_config(Config.load(str(path))).wait_bound is None


def test_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPU_TENANCY_PLANNER_WAIT_BOUND_SECONDS", "1800")
    assert Config.load().planner_wait_bound_seconds == 1800


@pytest.mark.parametrize("bad", [-1, "4h", 1.5])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError, match="planner_wait_bound_seconds"):
        Config.load(planner_wait_bound_seconds=bad)


def test_gpu_hours_bound_changes_the_service_order(monkeypatch):
    # big (8 GPUs) has waited 2 h = 16 GPU-hours: past a bound of 16, not past one of 17
    settings = planner_settings.from_config(Config.load(planner_wait_bound_gpu_hours=17))
    assert list(ledger.run_planner(inputs(), NOW, settings).leases) == ["small", "big"]
    monkeypatch.setenv("GPU_TENANCY_PLANNER_WAIT_BOUND_GPU_HOURS", "16")
    settings = planner_settings.from_config(Config.load())
    assert settings.wait_bound_gpu_hours == 16.0
    assert list(ledger.run_planner(inputs(), NOW, settings).leases) == ["big", "small"]


@pytest.mark.parametrize("bad", [-1, "32", True, float("nan"), float("inf")])
def test_bad_gpu_hours_are_refused(bad):
    with pytest.raises(ValueError, match="planner_wait_bound_gpu_hours"):
        Config.load(planner_wait_bound_gpu_hours=bad)


def test_wait_bound_leases_reaches_the_planner(monkeypatch):
    monkeypatch.setenv("GPU_TENANCY_PLANNER_WAIT_BOUND_LEASES", "2")
    assert planner_settings.from_config(Config.load(planner_wait_bound_seconds=H)).wait_bound_leases == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_bad_wait_bound_leases_are_refused(bad):
    with pytest.raises(ValueError, match="planner_wait_bound_leases"):
        Config.load(planner_wait_bound_leases=bad)


def test_keep_etas_is_off_by_default_and_reaches_the_planner(monkeypatch):
    assert planner_settings.from_config(Config.load()).keep_etas is False
    monkeypatch.setenv("GPU_TENANCY_PLANNER_KEEP_ETAS", "true")
    assert planner_settings.from_config(Config.load()).keep_etas is True


@pytest.mark.parametrize("bad", [1, "yes", 0.5])
def test_bad_keep_etas_is_refused(bad):
    with pytest.raises(ValueError, match="planner_keep_etas"):
        Config.load(planner_keep_etas=bad)


def test_age_size_reaches_the_service_order(monkeypatch):
    # heavy used 9x light's; big (8 GPUs) has waited 2 h = 16 GPU-hours: 4 halvings at 4, 2 at 8
    used = replace(inputs(), usage={("heavy", M): 900.0, ("light", M): 100.0})
    assert planner_settings.from_config(Config()).age_size_gpu_hours is None
    assert list(ledger.run_planner(used, NOW, planner_settings.from_config(Config())).leases) == ["small", "big"]
    settings = planner_settings.from_config(Config.load(planner_age_size_gpu_hours=8))
    assert list(ledger.run_planner(used, NOW, settings).leases) == ["small", "big"]
    monkeypatch.setenv("GPU_TENANCY_PLANNER_AGE_SIZE_GPU_HOURS", "4")
    settings = planner_settings.from_config(Config.load())
    assert settings.age_size_gpu_hours == 4.0
    assert list(ledger.run_planner(used, NOW, settings).leases) == ["big", "small"]


@pytest.mark.parametrize("bad", [0, -1, "32", True, float("nan"), float("inf")])
def test_bad_age_size_is_refused(bad):
    with pytest.raises(ValueError, match="planner_age_size_gpu_hours"):
        Config.load(planner_age_size_gpu_hours=bad)


def test_queued_charge_reaches_the_service_order(monkeypatch):
    # heavy used 10 GPU-hours, light none; light holds 8 GPUs for 3 h more (24 GPU-hours): charged
    # 1x, light's lease scores 24 against heavy's 10, so the heavy tenant's big lease goes first
    q = {(p, M): QuotaLimit(p, M, 16) for p in ("heavy", "light")}
    waiting = [LeaseRequest("big", "heavy", M, 8, 1, H, NOW - 2 * H, None, NOW - 2 * H),
               LeaseRequest("small", "light", M, 8, 1, H, NOW - 60, None, NOW - 60)]
    holds = [Hold("run", "light", "h1", M, 8, NOW - H, NOW + 3 * H)]
    used = ledger.PlannerInputs([Host("h1", M, 8), Host("h2", M, 8)], holds, q, waiting, {("heavy", M): 10.0})
    assert planner_settings.from_config(Config()).queued_charge is None
    assert list(ledger.run_planner(used, NOW, planner_settings.from_config(Config())).leases) == ["small", "big"]
    settings = planner_settings.from_config(Config.load(planner_queued_charge=0.25))   # 6 < 10
    assert list(ledger.run_planner(used, NOW, settings).leases) == ["small", "big"]
    monkeypatch.setenv("GPU_TENANCY_PLANNER_QUEUED_CHARGE", "1")
    settings = planner_settings.from_config(Config.load())
    assert settings.queued_charge == 1.0
    assert list(ledger.run_planner(used, NOW, settings).leases) == ["big", "small"]


@pytest.mark.parametrize("bad", [0, -1, "1", True, float("nan"), float("inf"), 1e308, 1000.5])
def test_bad_queued_charge_is_refused(bad):
    with pytest.raises(ValueError, match="planner_queued_charge must be a number > 0 and at most 1000"):
        Config.load(planner_queued_charge=bad)


def test_a_queued_charge_of_1000_and_spares_of_64_are_accepted():
    settings = planner_settings.from_config(Config.load(planner_queued_charge=1000, planner_queued_charge_spares_gpus=64))
    assert (settings.queued_charge, settings.queued_charge_spares_gpus) == (1000, 64)


def test_queued_charge_spares_reach_the_planner():
    assert planner_settings.from_config(Config()).queued_charge_spares_gpus is None
    settings = planner_settings.from_config(Config.load(planner_queued_charge=1, planner_queued_charge_spares_gpus=8))
    assert (settings.queued_charge, settings.queued_charge_spares_gpus) == (1, 8)


@pytest.mark.parametrize("bad", [0, -1, "8", True, 8.5, 65, 10**9])
def test_bad_queued_charge_spares_are_refused(bad):
    with pytest.raises(ValueError, match="planner_queued_charge_spares_gpus must be a whole number of GPUs from 1 to 64"):
        Config.load(planner_queued_charge_spares_gpus=bad)
