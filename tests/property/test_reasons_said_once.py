"""A plan makes the reasons that many leases repeat word for word once (PlanRun.said,
PlanRun.capacity_said): every lease's reasons are the ones made afresh for it."""
from __future__ import annotations

import pytest

from gpu_tenancy.domain import plan_run
from gpu_tenancy.domain.planner import plan
from tests.property.test_lazy_plan_property import NOW, world


class Forgetful(dict):
    """Keeps nothing: each reason is made afresh, as before they were kept."""

    def __setitem__(self, key, value) -> None:
        pass


@pytest.mark.parametrize("chunk", range(4))
def test_reasons_kept_for_many_leases_are_those_made_for_each(chunk, monkeypatch):
    kept = {}
    for seed in range(chunk * 100, chunk * 100 + 100):
        hosts, holds, quotas, waiting, usage, settings, _ = world(seed)
        kept[seed] = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
    made = plan_run.PlanRun.__init__

    def forgetting(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.said, self.capacity_said = Forgetful(), Forgetful()
    monkeypatch.setattr(plan_run.PlanRun, "__init__", forgetting)
    said = 0
    for seed, p in kept.items():
        hosts, holds, quotas, waiting, usage, settings, _ = world(seed)
        fresh = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
        for lid, pl in p.leases.items():
            assert pl.reasons == fresh.leases[lid].reasons, (seed, lid)
            said += len(pl.reasons)
    assert said > 500   # the worlds have leases that wait, and why
