"""A cloud's lease history as the what-if replays it: the hosts, the quotas, the
priority classes and, for each lease that held GPUs, when it was asked for, what for,
and how long it really held them. Plain data, and its JSON form (an exported file)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpu_tenancy.domain.model import Host, QuotaLimit

FORMAT = "gpu-tenancy-history/1"


@dataclass(frozen=True)
class Lease:
    """One lease of the history, as the replay's scheduler reads it; bench/traces.py's Job
    too (a trace's job fills the first fields; the others are what a real lease adds: its
    model, priority and start)."""
    jid: str
    tenant: str                 # the project
    arrival: int                # when it was asked for
    runtime: int                # how long it held its GPUs (its real start to its real end)
    gpus_per_vm: int
    vms: int
    asked: int = 0              # the duration it asked for (0: = runtime)
    gpu_model: str = "GPU"
    priority: int = 0
    earliest_start: int = 0     # the start it asked for (0: on arrival)
    priority_class: str | None = None
    seq: int = 0                # the order it was asked in (ties of arrival)

    @property
    def gpus(self) -> int:
        return self.gpus_per_vm * self.vms

    @property
    def duration(self) -> int:
        return self.asked or self.runtime

    @property
    def gpu_time(self) -> int:
        """GPU-seconds it held (what the bench's trace statistics weigh a job by)."""
        return self.gpus * self.runtime

    @property
    def start_asked(self) -> int:
        return max(self.arrival, self.earliest_start)


@dataclass(frozen=True)
class History:
    start: int                  # the window: leases asked for in [start, end)
    end: int
    hosts: tuple[Host, ...]
    quotas: dict[tuple[str, str], QuotaLimit]
    leases: tuple[Lease, ...]   # in the order they were asked for
    priority_classes: dict[str, int] = field(default_factory=dict)   # name: priority
    actual_starts: dict[str, int] = field(default_factory=dict)      # jid: the start it really had

    @property
    def capacity(self) -> int:
        return sum(h.gpus for h in self.hosts)


def to_json(h: History) -> dict[str, Any]:
    return {"format": FORMAT, "start": h.start, "end": h.end,
            "hosts": [asdict(x) for x in h.hosts],
            "quotas": [asdict(q) for q in h.quotas.values()],
            "priority_classes": dict(h.priority_classes),
            "leases": [{**asdict(x), "actual_start": h.actual_starts.get(x.jid)} for x in h.leases]}


def from_json(data: Any) -> History:
    """A history from its JSON form; ValueError, in words, when it is not one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a lease history: it should be a JSON object with \"format\": \"{FORMAT}\" "
                         "(gpu-tenancy whatif --export writes one)")
    try:
        hosts = tuple(Host(**x) for x in data["hosts"])
        quotas = {(q.project_id, q.gpu_model): q for q in (QuotaLimit(**x) for x in data["quotas"])}
        leases, actual = [], {}
        for x in data["leases"]:
            x = dict(x)
            started = x.pop("actual_start", None)
            lease = Lease(**x)
            if started is not None:
                actual[lease.jid] = int(started)
            leases.append(lease)
        return History(int(data["start"]), int(data["end"]), hosts, quotas, tuple(leases),
                       {str(k): int(v) for k, v in data.get("priority_classes", {}).items()}, actual)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the lease history is malformed: {exc}") from None
