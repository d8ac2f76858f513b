"""The model index's incremental bookkeeping against a rebuild from scratch:
after every reservation, each host's runs, the live heap entries, the free
levels, the idle hosts and the free-now counts must be what a fresh index
over the same profiles would hold."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain import capacity
from gpu_tenancy.domain.capacity import ModelIndex
from gpu_tenancy.domain.idle_hosts import IdleHosts
from gpu_tenancy.domain.model import Host
from gpu_tenancy.domain.profile import INF, length_class


def runs_by_sweep(prof, cap):
    """Every g's runs in one sweep of the profile, as a reference
    independent of the index's own run code: {g: [(start, end, free_at_start)]}."""
    out = {g: [] for g in range(1, cap + 1)}
    opened = {}
    prev = 0
    for t, v in zip(prof.times, prof.vals):
        c = min(max(v, 0), cap)
        for g in range(prev + 1, c + 1):
            opened[g] = (t, c)
        for g in range(c + 1, prev + 1):
            out[g].append((opened[g][0], t, opened[g][1]))
        prev = c
    for g in range(1, prev + 1):
        out[g].append((opened[g][0], INF, opened[g][1]))
    return out

NOW = 1_800_000_000


def live_heap_entries(mi: ModelIndex) -> set[tuple[int, str, int, int, int]]:
    out = set()
    for g in mi.tracked:
        for c, L in enumerate(mi.heaps[g]):
            assert L == sorted(L)
            for (s, f, name, e) in L:
                if (s, e, f) in mi.hosts[name].runs[g]:
                    assert length_class(e - s) == c
                    out.add((g, name, s, e, f))
    return out


def assert_like_rebuilt(mi: ModelIndex, hosts, origin: int) -> None:
    fresh = ModelIndex(mi.gpu_model, hosts, origin)
    for name, hs in mi.hosts.items():
        fresh.hosts[name].prof.times[:] = hs.prof.times
        fresh.hosts[name].prof.vals[:] = hs.prof.vals
    fresh.build()
    for g in mi.tracked:
        fresh._track(g)
    for name, hs in mi.hosts.items():
        want = runs_by_sweep(hs.prof, hs.gpus)
        for g in mi.tracked:
            if g > hs.gpus:
                continue
            assert hs.run_lists[g] == want[g], (name, g)
            assert hs.runs[g] == set(want[g]), (name, g)
        assert hs.idle_from == fresh.hosts[name].idle_from
    assert live_heap_entries(mi) == live_heap_entries(fresh)
    assert mi.idle.tree == fresh.idle.tree
    assert mi.now_count == fresh.now_count
    if mi.levels is None:   # fewer hosts than LEVELS_HOSTS: none kept
        assert fresh.levels is None
    else:
        assert fresh.levels is not None
        assert [[sorted(L) for L in per] for per in mi.levels.lists] == fresh.levels.lists


@pytest.mark.parametrize("levels_from", [1, capacity.LEVELS_HOSTS])
@pytest.mark.parametrize("seed", range(40))
def test_reserve_keeps_the_index_as_a_rebuild_would(seed, levels_from, monkeypatch):
    monkeypatch.setattr(capacity, "LEVELS_HOSTS", levels_from)
    rng = random.Random(seed)
    hosts = [Host(f"h{i}", "A100", rng.choice([1, 2, 4, 8, 8])) for i in range(rng.randint(1, 5))]
    mi = ModelIndex("A100", hosts, NOW)
    for h in hosts:
        for _ in range(rng.randint(0, 3)):
            a = NOW - 600 if rng.random() < .5 else NOW + rng.randint(0, 20) * 300
            # holds may over-commit a host (free goes below 0)
            mi.apply_hold(h.name, a, a + rng.randint(1, 30) * 300, rng.randint(1, h.gpus))
    mi.build()
    untracked = list(range(1, mi.max_gpus + 1))
    rng.shuffle(untracked)
    assert_like_rebuilt(mi, hosts, NOW)
    for step in range(40):
        if untracked and step % 5 == 0:   # runs of a g start being kept when first asked about
            mi.earliest(NOW, 600, untracked.pop())
        h = rng.choice(hosts)
        hs = mi.hosts[h.name]
        a = NOW + rng.choice([-300, 0, 0]) + rng.randint(0, 40) * 150 + rng.choice([0, 0, 7])
        b = a + rng.randint(1, 30) * 150 + rng.choice([0, 0, 13])
        if rng.random() < 0.1:
            b = INF   # runs to the end of time
        room = hs.prof.min_on(max(a, NOW), b) if b > max(a, NOW) else 0
        if room < 1:
            continue
        mi.reserve(h.name, a, b, rng.randint(1, room))
        assert_like_rebuilt(mi, hosts, NOW)


@pytest.mark.parametrize("seed", range(20))
def test_idle_hosts_answer_like_a_scan(seed):
    rng = random.Random(seed)
    idle_from = {f"h{i:03d}": rng.choice([NOW, NOW + rng.randint(1, 50) * 60, INF])
                 for i in range(rng.randint(1, 40))}
    gpus = {name: rng.choice([1, 2, 4, 8]) for name in idle_from}
    idle = IdleHosts((gpus[n], n, t) for n, t in idle_from.items())
    for _ in range(200):
        if rng.random() < 0.3:
            name = rng.choice(sorted(idle_from))
            idle_from[name] = rng.choice([idle_from[name], NOW + rng.randint(1, 60) * 60, INF])
            idle.set_idle_from(name, idle_from[name])
        t, g = NOW + rng.randint(-1, 61) * 60, rng.randint(1, 9)
        want = [(gpus[n], n) for n, at in idle_from.items() if at <= t and gpus[n] >= g]
        assert idle.least_idle(t, g) == (min(want) if want else None)
