"""gpu_use_retention_days: the engine's housekeeping prunes the agents' hourly GPU-use rows
older than that, keeps the newer ones, and /metrics' all-time counters do not go down."""
from __future__ import annotations

import re

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from gpu_tenancy.engine import housekeeping
from tests.conftest import T0
from tests.functional.test_metrics_cost import ADMIN, add_history

DAY = 86400


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, gpu_use_retention_days=20)


def measured(client) -> float:
    text = client.get("/metrics", headers=ADMIN).get_data(as_text=True)
    return sum(float(v) for v in re.findall(r"gpu_tenancy_gpu_hours_measured_total\{[^}]*\} ([\d.e+]+)", text))


def hours_kept(sessions) -> list[int]:
    with session_scope(sessions) as session:
        return sorted(to_epoch(row.hour) for row in session.query(m.GpuUseHour))


def test_rows_older_than_the_retention_are_pruned_by_the_engine_and_the_counters_keep_them(client, runtime,
                                                                                         engine_tick):
    add_history(runtime.sessions, 40, 7, before=T0)     # over the 40 days before now
    rows = hours_kept(runtime.sessions)
    assert rows[0] < T0 - 21 * DAY and rows[-1] > T0 - 19 * DAY
    total = measured(client)
    engine_tick()                      # the engine's pass runs its housekeeping
    kept = hours_kept(runtime.sessions)
    assert kept == [h for h in rows if h >= T0 - 20 * DAY]
    assert measured(client) == pytest.approx(total)
    housekeeping.run(runtime.sessions, T0, runtime.config)     # again: nothing more to prune
    assert hours_kept(runtime.sessions) == kept


@pytest.mark.parametrize("days", [0, -1, 36501, 1.5, True, "400"])
def test_a_retention_that_is_not_a_number_of_days_is_refused(db_url, days):
    with pytest.raises(ValueError, match="gpu_use_retention_days"):
        Config.load(database_url=db_url, gpu_use_retention_days=days)
