"""Issue 18's tables: per load, every scheduler under the three duration models, from saved runs.

    python bench/replay.py --trace philly-final --load 0.8 --hosts 43 --schedulers EASY,FIFO,refuse+retry
    python bench/replay.py --trace philly-final --load 0.8 --hosts 43 --schedulers gpu-tenancy
    # ... each with --overask and --overask 2x too, and --load 0.95 --hosts 36; then:
    python bench/goals_table.py --trace philly-final --loads 0.8,0.95

Reads the runs bench/replay.py saved (<out>/<tag>.runs/<scheduler>.json) and prints one
Markdown table per load: P50, P90, ≥8-GPU P90, ETA kept, lateness P90, GPU use, Jain
use/quota, and P50, P90, ≥8-GPU P90 against EASY's under the same durations. A scheduler
with no saved run is printed as "not run" rather than left out.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from replay import OVERASK, saved_runs  # noqa: E402
from report import hms, ratio, within  # noqa: E402

DURATIONS = (("exact", None), ("next hour", "hour"), ("2×", "2x"))
NAMES = {"gpu-tenancy": "gpu-tenancy (default)", "gpu-tenancy@keep": "gpu-tenancy, keep_etas"}
HEAD = ("| durations | scheduler | P50 wait | P90 wait | ≥8-GPU P90 | ≥8-GPU P90, tenants within share (÷ EASY) "
        "| ETA kept | lateness P90 | GPU use | Jain use/quota | P50, P90, ≥8 P90 ÷ EASY | run: wall, CPU |")


def row(durations: str, name: str, r: dict | None, easy: dict | None) -> str:
    label = NAMES.get(name, name)
    if r is None:
        return f"| {durations} | {label} | not run | | | | | | | | | |"
    if r.get("n_eta") is None:
        eta = "n/a | n/a"   # tells no one when they will start
    elif not r["n_eta"]:
        eta = "– | –"
    else:
        eta = f"{100 * r['eta_kept']:.1f} % of {r['n_eta']:,} told | {hms(r['late_p90'])}"
    vs = ", ".join(ratio(r[k], easy[k]) for k in ("p50", "p90", "big_p90")) if easy else "-"
    cpu = f", {r['cpu_s']:.0f} s" if "cpu_s" in r else ""
    return (f"| {durations} | {label} | {hms(r['p50'])} | {hms(r['p90'])} | {hms(r['big_p90'])} | {within(r, easy)} | {eta} "
            f"| {100 * r['use']:.1f} % | {r['jain_quota']:.2f} | {vs} | {r['wall_s']:.0f} s{cpu} |")


def tables(out: str, trace: str, loads: list[float], names: list[str]) -> str:
    parts = []
    for load in loads:
        lines = [f"{round(load * 100)} % load:", "", HEAD, "|" + "---|" * 12]
        for label, model in DURATIONS:
            tag = f"{trace}-{round(load * 100)}" + (OVERASK[model][0] if model else "")
            runs = saved_runs(out, tag, names)
            lines += [row(label, n, runs.get(n), runs.get("EASY")) for n in names]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--loads", default="0.8,0.95")
    ap.add_argument("--schedulers", default="gpu-tenancy,EASY,FIFO,refuse+retry")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    print(tables(a.out, a.trace, [float(x) for x in a.loads.split(",")], a.schedulers.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
