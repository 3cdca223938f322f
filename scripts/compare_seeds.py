"""Join compare.json files made with different seeds into one table (Markdown on stdout or --out).

    python scripts/compare_seeds.py docs/results/cpu/compare docs/results/cpu/compare_seed1 \\
        docs/results/cpu/compare_seed2 --out docs/results/cpu/compare_seeds.md

One seed's "search speedup" hangs on a handful of noisy measurements (both strategies' final best
moves by tens of percent between seeds on a 2-core CPU), so the claim is read across seeds: per
workload and seed the final bests and the speedup, then how often Pruner reached stock's best and
the geometric mean of Pruner's final best over stock's.
"""

import argparse
import json
import math
import os
import statistics
import sys

from _common import write_text


def load(out_dir: str) -> dict:
    with open(os.path.join(out_dir, "compare.json")) as handle:
        return json.load(handle)


def rows(reports):
    for report in reports:
        for workload, entry in report["workloads"].items():
            summary = entry.get("summary", {})
            if "stock" in summary and "pruner" in summary:
                yield workload, report["seed"], summary["stock"], summary["pruner"]


def table(reports) -> str:
    lines = ["| workload | seed | stock best (us) | pruner best (us) | pruner / stock | search speedup |",
             "| --- | --- | --- | --- | --- | --- |"]
    ratios, speedups, reached, total = [], [], 0, 0
    for workload, seed, stock, pruner in sorted(rows(reports)):
        ratio = pruner["final_best_s"] / stock["final_best_s"]
        speedup = pruner.get("search_speedup")
        ratios.append(ratio)
        total += 1
        if speedup:
            reached += 1
            speedups.append(speedup)
        bests = f"{stock['final_best_s'] * 1e6:.1f} | {pruner['final_best_s'] * 1e6:.1f}"
        reach = f"{speedup:.2f}x" if speedup else "not reached"
        lines.append(f"| `{workload}` | {seed} | {bests} | {ratio:.2f} | {reach} |")
    if not total:
        raise SystemExit("no workload has both a stock and a pruner run")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    lines += ["", f"Pruner reached stock's final best in {reached} of {total} runs"
              + (f" (median search speedup {statistics.median(speedups):.2f}x when reached)" if speedups else "")
              + f"; geometric mean of Pruner's final best over stock's: {geo:.3f} (below 1: Pruner's is faster)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="compare --out directories")
    parser.add_argument("--out", help="write the Markdown here instead of stdout")
    args = parser.parse_args(argv)
    reports = [load(d) for d in args.dirs]
    header = "Seeds joined: " + ", ".join(f"`{d}` (seed {r['seed']})" for d, r in zip(args.dirs, reports)) + "\n\n"
    write_text(header + table(reports), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
