"""Hosts that empty together (PlannerSettings.empty_together, capacity.empty_together_key): a
one-VM lease goes, among the hosts where it starts earliest, where its end leaves the fewest GPUs
free, so small leases gather on hosts that stay busy anyway and the others empty whole sooner
for a big lease. Best fit, the default, chooses by the GPUs free at the start alone."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from naive_planner import NaiveIndex  # noqa: E402

from gpu_tenancy.config import Config  # noqa: E402
from gpu_tenancy.domain import capacity, scan_index  # noqa: E402
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings, plan  # noqa: E402
from gpu_tenancy.domain.profile import INF  # noqa: E402
from gpu_tenancy.engine import planner_settings  # noqa: E402
from gpu_tenancy.whatif import changes as ch  # noqa: E402
from gpu_tenancy.whatif.history import History  # noqa: E402

NOW = 1_800_000_000
H = 3600
M = "A100"
QUOTAS = {("p", M): QuotaLimit("p", M, 64)}
ON = PlannerSettings(empty_together=True)


@pytest.fixture(params=["compiled", "python"])
def index(request, monkeypatch):
    """Both indexes choose alike (tests/property/test_scan_index_agrees.py); each is tried here."""
    if request.param == "compiled" and not scan_index.available:
        pytest.skip("the compiled scan index is not built here")
    if request.param == "python":
        monkeypatch.setattr(scan_index, "available", False)
    return request.param


def hosts():
    """a1 is half taken for one more hour, a2 half taken for ten: at the start both have 4 free."""
    return ([Host("a1", M, 8), Host("a2", M, 8)],
            [Hold("soon", "p", "a1", M, 4, NOW - H, NOW + H), Hold("late", "p", "a2", M, 4, NOW - H, NOW + 10 * H)])


def ask(lid: str, gpus: int, hours: float, instances: int = 1, seq: int = 0) -> LeaseRequest:
    return LeaseRequest(lid, "p", M, gpus, instances, round(hours * H), NOW, None, NOW - 100 + seq, arrival=seq)


def placed(settings: PlannerSettings, *waiting: LeaseRequest, held=None) -> dict[str, tuple[int, tuple[str, ...]]]:
    hs, holds = hosts()
    p = plan(NOW, hs, holds if held is None else held, QUOTAS, list(waiting), {}, settings)
    return {lid: (pl.placement.start - NOW, pl.placement.hosts) for lid, pl in p.leases.items() if pl.placement}


def test_a_small_lease_goes_where_the_host_stays_busy_after_it(index):
    # best fit: 4 free on both at the start, so the name decides; empty together: a1 would have
    # 7 free once the lease ends, a2 only 3 (its other lease outlasts it)
    assert placed(PlannerSettings(), ask("s", 1, 2))["s"] == (0, ("a1",))
    assert placed(ON, ask("s", 1, 2))["s"] == (0, ("a2",))


def test_the_earliest_start_comes_first(index):
    # a2 is full for ten hours: the lease starts now on a1 whatever a1 has free after it
    held = [Hold("soon", "p", "a1", M, 4, NOW - H, NOW + H), Hold("late", "p", "a2", M, 8, NOW - H, NOW + 10 * H)]
    assert placed(ON, ask("s", 1, 2), held=held)["s"] == (0, ("a1",))


def test_ties_after_the_end_go_by_best_fit_then_name(index):
    # both hosts empty for good by the lease's end (14 h): 8 free after on each; the start decides,
    # a2 with its 4 free against a1's 6 (a1's hold of 2)
    held = [Hold("x", "p", "a1", M, 2, NOW - H, NOW + H), Hold("y", "p", "a2", M, 4, NOW - H, NOW + 10 * H)]
    assert placed(ON, ask("s", 1, 14), held=held)["s"] == (0, ("a2",))
    held = [Hold("x", "p", "a1", M, 4, NOW - H, NOW + H), Hold("y", "p", "a2", M, 4, NOW - H, NOW + 10 * H)]
    assert placed(ON, ask("s", 1, 14), held=held)["s"] == (0, ("a1",))


def test_small_leases_gathered_on_the_busy_host_let_a_big_one_start_sooner(index):
    """Four 1-GPU leases of 2 h, then one of a whole host. Best fit fills a1 (the name breaks the
    tie), which then empties at 2 h; hosts that empty together put them on a2, busy for ten hours
    anyway, and a1 is whole at 1 h."""
    small = [ask(f"s{i}", 1, 2, seq=i) for i in range(4)]
    big = ask("big", 8, 3, seq=9)
    best = placed(PlannerSettings(), *small, big)
    together = placed(ON, *small, big)
    assert {best[s.lease_id][1] for s in small} == {("a1",)} and best["big"] == (2 * H, ("a1",))
    assert {together[s.lease_id][1] for s in small} == {("a2",)} and together["big"] == (H, ("a1",))


def test_a_gang_is_chosen_as_before(index):
    gang = ask("g", 2, 2, instances=2)
    assert placed(ON, gang) == placed(PlannerSettings(), gang)


def test_the_key_bounds_what_it_reads():
    # a host over-committed after (fewer than 0 free) counts as 0; never more than the host has
    assert capacity.empty_together_key(-3, 9, 8) == (0, 8)
    assert capacity.empty_together_key(5, 2, 8) == (5, 2)


def test_the_setting_comes_from_the_configuration(monkeypatch):
    assert planner_settings.from_config(Config()).empty_together is False
    assert planner_settings.from_config(Config.load(planner_empty_together=True)).empty_together is True
    monkeypatch.setenv("GPU_TENANCY_PLANNER_EMPTY_TOGETHER", "true")
    assert planner_settings.from_config(Config.load()).empty_together is True


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_a_setting_that_is_not_true_or_false_is_refused(bad):
    with pytest.raises(ValueError, match="planner_empty_together must be true or false"):
        Config.load(planner_empty_together=bad)


def test_a_what_if_turns_it_on_and_off():
    history = History(0, 86400, (Host("h1", M, 8),), QUOTAS, ())
    _, s = ch.apply(history, PlannerSettings(), ch.parse(["planner.empty_together=true"]))
    assert s == ON
    _, s = ch.apply(history, ON, ch.parse(["planner.empty_together=off"]))
    assert s == PlannerSettings()
    with pytest.raises(ch.BadChange, match="planner.empty_together: 'maybe' is not true or false"):
        ch.apply(history, PlannerSettings(), ch.parse(["planner.empty_together=maybe"]))


def test_a_lease_to_forever_reads_the_last_instant_in_the_reference_too(index):
    """The reference planner read a hold ending at forever as over by the lease's end when that
    end was forever too (a review's fuzzing: the indexes read the last segment)."""
    hs = [Host("a1", M, 8), Host("a2", M, 8)]
    naive = NaiveIndex(hs, NOW, empty_together=True)
    naive.reserve("a1", NOW, NOW + 10, 6)   # best fit at the start, empty for good after ten seconds
    naive.reserve("a2", NOW, INF, 4)        # half taken for ever
    fast = capacity.ModelIndex(M, hs, NOW, {"a1": [(NOW, NOW + 10, -6)], "a2": [(NOW, INF, -4)]},
                               empty_together=True)
    fast.build()
    assert naive.earliest(NOW, INF - NOW, 1) == fast.earliest(NOW, INF - NOW, 1) == (NOW, ("a2",))
