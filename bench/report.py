"""The replay's table (Markdown) and plots (PNG, matplotlib)."""
from __future__ import annotations

import os

import numpy as np


def hms(s: float) -> str:
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def ratio(a: float, b: float) -> str:
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}"


def eta_cells(r: dict) -> str:
    """ETA kept %, lateness P50 and P90, and the share of waiting jobs given an ETA at submission."""
    if "n_eta" not in r:
        return "– | – | – | –"            # a saved run from before ETAs were measured
    if r["n_eta"] is None:
        return "n/a | n/a | n/a | none"   # the scheduler tells no one when they will start
    given = f"{r['n_eta']} of {r['n_waited']}"
    if not r["n_eta"]:
        return f"– | – | – | {given}"
    return f"{100 * r['eta_kept']:.1f} % | {hms(r['late_p50'])} | {hms(r['late_p90'])} | {given}"


def within(r: dict, easy: dict | None) -> str:
    """The big leases' P90 over the tenants within their share (metrics.big_within_share), and ÷ EASY's."""
    if "big_p90_within" not in r:   # (a run saved before the figure was kept)
        return "–"
    vs = f" ({ratio(r['big_p90_within'], easy['big_p90_within'])})" if easy and "big_p90_within" in easy else ""
    return f"{hms(r['big_p90_within'])}{vs}"


def table(results: dict[str, dict], ref_easy: str = "EASY", ref_gt: str = "gpu-tenancy") -> str:
    """One row per scheduler; ratios of P50/P90/big-P90 against EASY and against gpu-tenancy."""
    e, g = results.get(ref_easy), results.get(ref_gt)
    head = ("| scheduler | P50 wait | P90 wait | P99 wait | mean wait | ≥8-GPU P50 | ≥8-GPU P90 | GPU use "
            "| idle frag. | Jain slowdown | Jain use/quota | ETA kept | lateness P50 | lateness P90 | waiting given an ETA "
            "| P50, P90, ≥8 P90 ÷ EASY | P50, P90, ≥8 P90 ÷ gpu-tenancy | ≥8-GPU P90, tenants within share (÷ EASY) |")
    lines = [head, "|" + "---|" * 18]
    for name, r in results.items():
        if r.get("bound_only"):
            lines.append(f"| {name} | – | – | – | ≥ {hms(r['mean'])} | – | – | – | – | – | – | – | – | – | – | "
                         f"mean {ratio(r['mean'], e['mean']) if e else '-'} | "
                         f"mean {ratio(r['mean'], g['mean']) if g else '-'} | – |")
            continue
        re_ = ", ".join(ratio(r[k], e[k]) for k in ("p50", "p90", "big_p90")) if e else "-"
        rg = ", ".join(ratio(r[k], g[k]) for k in ("p50", "p90", "big_p90")) if g else "-"
        lines.append(
            f"| {name} | {hms(r['p50'])} | {hms(r['p90'])} | {hms(r['p99'])} | {hms(r['mean'])} "
            f"| {hms(r['big_p50'])} | {hms(r['big_p90'])} | {100 * r['use']:.1f} % | {100 * r['frag']:.1f} % "
            f"| {r['jain_slowdown']:.2f} | {r['jain_quota']:.2f} | {eta_cells(r)} | {re_} | {rg} | {within(r, e)} |")
    return "\n".join(lines)


def smooth(series: np.ndarray, k: int) -> np.ndarray:
    """Centred moving average over k points; the ends average what there is
    (no zeros padded in, which would draw a ramp at both ends)."""
    if k <= 1 or len(series) <= k:
        return series
    box = np.ones(k)
    return np.convolve(series, box, mode="same") / np.convolve(np.ones(len(series)), box, mode="same")


def plots(results: dict[str, dict], title: str, path_prefix: str) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(os.path.dirname(path_prefix) or ".", exist_ok=True)
    made = []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, r in results.items():
        if r.get("bound_only"):
            continue
        w = np.sort(r["waits"])
        ax.plot(np.maximum(w, 1), np.arange(1, len(w) + 1) / len(w), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, waits under 1 s drawn at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"wait CDF: {title}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path_prefix + "-wait-cdf.png", dpi=110)
    plt.close(fig)
    made.append(path_prefix + "-wait-cdf.png")

    fig, ax = plt.subplots(figsize=(9, 4.2))
    hours = max((len(r["use_series"]) for r in results.values() if not r.get("bound_only")), default=0)
    window = max(1, min(24, hours // 30))   # a day, or less on a short trace
    for name, r in results.items():
        if r.get("bound_only"):
            continue
        h = (r["hours"] - r["hours"][0]) / 86400
        ax.plot(h, 100 * smooth(r["use_series"], window), label=name, lw=1)
    ax.set_xlabel("days from the first submission")
    ax.set_ylabel(f"GPUs busy (% of cluster, {window} h moving average)")
    ax.set_title(f"GPU use over time: {title}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path_prefix + "-gpu-use.png", dpi=110)
    plt.close(fig)
    made.append(path_prefix + "-gpu-use.png")
    return made
