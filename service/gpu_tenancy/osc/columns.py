"""How nested lease fields read in a table, while -f json/yaml keep their structure."""
from __future__ import annotations

from cliff import columns


class QueueColumn(columns.FormattableColumn):
    """A waiting lease's place: position, ETA, start-by (and why it is past the ETA) and the
    reasons in words."""

    def human_readable(self) -> str:
        if not self._value:
            return ""
        lines = [f"position {self._value.get('position')}, eta {self._value.get('eta') or 'unknown'}"
                 + (f", start by {self._value['start_by']}" if self._value.get("start_by") else "")]
        basis = self._value.get("start_by_basis")
        if basis and self._value.get("start_by") != self._value.get("eta"):
            lines.append(f"start by, why: {basis.get('message', '')}")
        lines += [reason.get("message", "") for reason in self._value.get("reasons") or []]
        return "\n".join(lines)

    def machine_readable(self):
        return self._value


class RecordsColumn(columns.FormattableColumn):
    """A list of flat records (allocations, servers): one line each."""

    def human_readable(self) -> str:
        return "\n".join(", ".join(f"{k}={v}" for k, v in item.items()) for item in self._value or [])

    def machine_readable(self):
        return self._value


class RecordColumn(columns.FormattableColumn):
    """One flat record (volume, failure) on one line."""

    def human_readable(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in (self._value or {}).items())

    def machine_readable(self):
        return self._value


class ServersColumn(columns.FormattableColumn):
    """A lease's VMs, one line each, their addresses as `ip (kind on network)`."""

    def human_readable(self) -> str:
        lines = []
        for server in self._value or []:
            flat = {k: v for k, v in server.items() if k not in ("addresses", "ssh")}
            line = ", ".join(f"{k}={v}" for k, v in flat.items())
            if server.get("addresses"):
                line += ", addresses=" + " ".join(f"{a['ip']} ({a['kind']} on {a['network']})"
                                                  for a in server["addresses"])
            lines.append(line)
        return "\n".join(lines)

    def machine_readable(self):
        return self._value


class OffersColumn(columns.FormattableColumn):
    """A waiting lease's counter-offers: each in words, then how to take it."""

    def human_readable(self) -> str:
        return "\n".join(f"{n}. {offer['summary']} (until {offer['expires_at']})\n"
                         f"   take it: --accept-offer {offer['id']}" for n, offer in enumerate(self._value or [], 1))

    def machine_readable(self):
        return self._value


class LinesColumn(columns.FormattableColumn):
    """Lines (each VM's ssh command), one per line in a table, one string with newlines in JSON.
    A column rather than the joined string: the joining newlines are ours, kept when the words in
    each line are made printable (inert.py)."""

    def human_readable(self) -> str:
        return "\n".join(self._value or [])

    def machine_readable(self):
        return "\n".join(self._value) if self._value else None
