"""Comparisons made with different seeds, read as one table (``ms-pruner compare-seeds``).

One seed's search speedup hangs on a handful of noisy measurements (both strategies' final best
moves by tens of percent between seeds on a 2-core CPU), so the claim is read across seeds: per
workload and seed the final bests and the speedup, then how often Pruner reached stock's best and
the geometric mean of Pruner's final best over stock's.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import List

from ..errors import UserError
from ..tuning.compare import load_report


def _pairs(reports: List[dict]):
    for report in reports:
        for workload, entry in report["workloads"].items():
            summary = entry.get("summary", {})
            if "stock" in summary and "pruner" in summary:
                yield workload, report["seed"], summary["stock"], summary["pruner"]


def seeds_table(dirs: List[str]) -> str:
    """Markdown: per workload and seed stock's and Pruner's final best and the search speedup, then
    the summary line; the comparisons are ``compare --out`` directories."""
    reports = [load_report(os.path.join(d, "compare.json"), "comparison") for d in dirs]
    lines = ["Seeds joined: " + ", ".join(f"`{d}` (seed {r['seed']})" for d, r in zip(dirs, reports)), "",
             "| workload | seed | stock best (us) | pruner best (us) | pruner / stock | search speedup |",
             "| --- | --- | --- | --- | --- | --- |"]
    ratios, speedups = [], []
    for workload, seed, stock, pruner in sorted(_pairs(reports)):
        ratios.append(pruner["final_best_s"] / stock["final_best_s"])
        speedup = pruner.get("search_speedup")
        speedups += [speedup] if speedup else []
        reach = f"{speedup:.2f}x" if speedup else "not reached"
        bests = f"{stock['final_best_s'] * 1e6:.1f} | {pruner['final_best_s'] * 1e6:.1f}"
        lines.append(f"| `{workload}` | {seed} | {bests} | {ratios[-1]:.2f} | {reach} |")
    if not ratios:
        raise UserError("no workload has both a stock and a pruner run in " + ", ".join(dirs))
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    median = f" (median search speedup {statistics.median(speedups):.2f}x when reached)" if speedups else ""
    lines += ["", f"Pruner reached stock's final best in {len(speedups)} of {len(ratios)} runs{median}; geometric "
              f"mean of Pruner's final best over stock's: {geo:.3f} (below 1: Pruner's is faster)."]
    return "\n".join(lines) + "\n"
