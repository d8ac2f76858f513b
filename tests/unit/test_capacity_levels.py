"""The free-level index against a direct reading of every host's profile,
after random holds and reservations."""
from __future__ import annotations

import random

from gpu_tenancy.domain import capacity
from gpu_tenancy.domain.capacity import ModelIndex
from gpu_tenancy.domain.model import Host
from gpu_tenancy.domain.profile import INF

NOW = 1_800_000_000


def hosts_with_v_free_at(mi: ModelIndex, v: int, t: int) -> set[str]:
    """Hosts with exactly v free at t, idle-forever hosts left out."""
    return {name for name, hs in mi.hosts.items()
            if hs.prof.value_at(t) == v and not (hs.idle_from <= t)}


def test_free_levels_track_reservations(monkeypatch):
    monkeypatch.setattr(capacity, "LEVELS_HOSTS", 1)   # kept on these few hosts too
    rng = random.Random(7)
    for _ in range(30):
        hosts = [Host(f"h{i}", "A100", rng.choice([4, 8])) for i in range(rng.randint(1, 8))]
        mi = ModelIndex("A100", hosts, NOW)
        for h in hosts:
            for _ in range(rng.randint(0, 2)):
                mi.apply_hold(h.name, NOW, NOW + rng.randint(1, 20) * 600, rng.randint(1, 2))
        mi.build()
        assert mi.levels is not None
        for _ in range(25):
            h = rng.choice(hosts)
            a = NOW + rng.randint(0, 30) * 600
            b = a + rng.randint(1, 20) * 600
            if mi.hosts[h.name].prof.min_on(a, b) >= 1:
                mi.reserve(h.name, a, b, 1)
            t = NOW + rng.randint(0, 60) * 300 + rng.choice([0, 1])
            for v in range(1, mi.max_gpus + 1):
                want = hosts_with_v_free_at(mi, v, t)
                got = mi.levels.least_name_at(v, t, lambda name, end: True)
                assert got == (min(want) if want else None), (v, t)
                # the segment end handed to `fits` is the end of the segment holding t
                for name in want:
                    seen = []
                    mi.levels.least_name_at(v, t, lambda n, end: n == name and not seen.append(end))
                    prof = mi.hosts[name].prof
                    assert seen == [prof.next_break(t) or INF]
