"""A what-if's figures as text, side by side (the CLI's answer)."""
from __future__ import annotations

from typing import Any


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}" if s >= 3600 else f"{s // 60}m{s % 60:02d}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def text(r: dict[str, Any]) -> str:
    cur, new = r["current"], r["proposed"]
    w = r["window"]
    lines = [f"history: {r['leases']} leases asked for {w['start']} to {w['end']} ({w['days']:g} days), "
             f"{r['gpus']} GPUs in service; replayed in {r['replay_seconds']:.1f} s",
             f"proposed: {', '.join(r['changes'])}", "",
             f"{'':24} {'current':>12} {'proposed':>12}"]
    rows = [("wait P50", hms(cur["p50"]), hms(new["p50"])), ("wait P90", hms(cur["p90"]), hms(new["p90"])),
            (">=8 GPUs wait P90", hms(cur["big_p90"]), hms(new["big_p90"])),
            ("ETA kept", pct(cur["eta_kept"]), pct(new["eta_kept"])),
            ("start-by kept", pct(cur["start_by_kept"]), pct(new["start_by_kept"])),
            ("GPU use", pct(cur["gpu_use"]), pct(new["gpu_use"])),
            ("Jain fairness", f"{cur['jain']:.3f}", f"{new['jain']:.3f}"),
            ("never started", str(cur["never_started"]), str(new["never_started"]))]
    lines += [f"{a:24} {b:>12} {c:>12}" for a, b, c in rows]
    lines += ["", f"{'project / GPU model':24} {'P50 now':>9} {'P50 new':>9} {'P90 now':>9} {'P90 new':>9}"]
    after = {(g["project_id"], g["gpu_model"]): g for g in new["groups"]}
    for g in cur["groups"]:
        n = after.get((g["project_id"], g["gpu_model"]), {})
        lines.append(f"{g['project_id'] + ' ' + g['gpu_model']:24} {hms(g['p50']):>9} {hms(n.get('p50')):>9} "
                     f"{hms(g['p90']):>9} {hms(n.get('p90')):>9}")
    lines += ["", "who gains or loses (P90 over all its leases):"]
    lines += [f"  {p['project_id']:22} {hms(p['p90_current']):>9} -> {hms(p['p90_proposed']):>9}  {p['verdict']}"
              for p in r["projects"]]
    return "\n".join(lines)
