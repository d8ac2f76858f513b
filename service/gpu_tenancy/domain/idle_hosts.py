"""Hosts by the time from which they are entirely free, for the question
"the least (GPUs, name) host of at least g GPUs that is idle from t on".

Hosts sit in a fixed order, by (GPUs, name); a tree of minima over that
order keeps each host's idle-from time, so the first host at or after a
position that is idle by t is found in O(log n), however few or many hosts
are idle at t.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from .profile import INF


class IdleHosts:
    __slots__ = ("order", "pos", "size", "tree")

    def __init__(self, hosts: Iterable[tuple[int, str, int]]):
        """hosts: (gpus, name, idle_from) for every host."""
        entries = sorted(hosts)
        self.order = [(gpus, name) for gpus, name, _ in entries]
        self.pos = {name: i for i, (_, name) in enumerate(self.order)}
        size = 1
        while size < len(entries):
            size *= 2
        self.size = size
        tree = [INF] * (2 * size)   # leaves at size + position; INF: never idle
        for i, (_, _, idle_from) in enumerate(entries):
            tree[size + i] = idle_from
        for i in range(size - 1, 0, -1):
            a, b = tree[2 * i], tree[2 * i + 1]
            tree[i] = a if a < b else b
        self.tree = tree

    def set_idle_from(self, name: str, idle_from: int) -> None:
        tree = self.tree
        i = self.size + self.pos[name]
        tree[i] = idle_from
        i >>= 1
        while i:
            a, b = tree[2 * i], tree[2 * i + 1]
            m = a if a < b else b
            if tree[i] == m:
                break
            tree[i] = m
            i >>= 1

    def least_idle(self, t: int, g: int) -> tuple[int, str] | None:
        """Least (gpus, name) among hosts of >= g GPUs entirely free from t on."""
        start = bisect_left(self.order, (g,))
        if start >= len(self.order):
            return None
        tree, size = self.tree, self.size
        i = size + start
        while tree[i] > t:
            while i & 1:    # a right child: climb until a left one
                i >>= 1
            if i == 0:
                return None
            i += 1          # its right sibling: the positions just after
        while i < size:
            i = 2 * i if tree[2 * i] <= t else 2 * i + 1
        return self.order[i - size]
