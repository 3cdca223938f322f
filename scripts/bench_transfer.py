"""Transfer-tuning on this machine's CPU (``llvm``): Pruner's first round with ``--warm-start``
against a cold first round and against the cold run's 64-trial best, same seed.

    python scripts/bench_transfer.py --out docs/results/cpu/transfer_tuning.json

For each (source, new) pair of one operator kind: the source is tuned here first (Pruner, ``--trials``
trials, ``--per-iter`` a round, the database a user already has); then the new workload twice with
the same settings and seed, cold and with ``warm_start=[source work dir]``. Each run's first round
is its first ``--per-iter`` records in measurement order. The pairs are shapes that no test and
no default was tuned on (the tests adapt ``matmul:128x128x128`` to ``256x64x512`` and a ResNet conv
to ``1x28x28x32x64``). Reported per pair: both first rounds' best, the cold run's best over all its
trials, the warm run's too, how many of the warm first round's picks were adapted and whether its
best was one of them, and the trial at which the cold run first measured the warm first round's best.
Timing noise on a shared CPU is real, so the cold run's best and the warm first round's best are
then built and run again side by side (``--remeasure`` times, in one batch each; the median).
Work dirs go under ``--work``; a rerun resumes them (tune_tir counts the records already there).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, git_commit, machine, write_json  # noqa: E402

import statistics  # noqa: E402

from ms_pruner.database.records import is_valid, mean_latency, records_in_file_order  # noqa: E402
from ms_pruner.hardware import resolve_target  # noqa: E402
from ms_pruner.tuning import tune_tir  # noqa: E402
from ms_pruner.tuning.driver import ROUND_LOG  # noqa: E402
from ms_pruner.tuning.remeasure import remeasure  # noqa: E402
from ms_pruner.workloads import parse_workload  # noqa: E402

PAIRS = (
    ("matmul:256x256x256:float32:float32", "matmul:384x192x128:float32:float32"),
    ("matmul_nt:128x256x256:float32:float32", "matmul_nt:256x128x384:float32:float32"),
    ("dense_bias_relu:128x256x128:float32:float32", "dense_bias_relu:64x512x256:float32:float32"),
    ("batch_matmul:4x64x128x64:float32:float32", "batch_matmul:8x128x64x128:float32:float32"),
    ("conv2d_nhwc:1x28x28x32x32k3s1p1:float32:float32", "conv2d_nhwc:1x14x14x64x64k3s1p1:float32:float32"),
)


def latencies_us(work_dir: str) -> list:
    """Each record's mean latency in measurement order (None where it failed)."""
    return [mean_latency(r) * 1e6 if is_valid(r) else None for r in records_in_file_order(work_dir)]


def fastest(records):
    return min((r for r in records if is_valid(r)), key=mean_latency)


def remeasured_us(records, repeats: int) -> list:
    """Median over ``repeats`` batches of each record built and run again here."""
    target = resolve_target("llvm", require_device=False).target
    runs = [[r.measured_s for r in remeasure(records, target)] for _ in range(repeats)]
    return [statistics.median(run[i] for run in runs if run[i] is not None) * 1e6 for i in range(len(records))]


def best(values) -> float:
    return min((v for v in values if v is not None), default=None)


def first_round_log(work_dir: str) -> dict:
    with open(os.path.join(work_dir, ROUND_LOG), encoding="utf-8") as handle:
        return json.loads(handle.readline())["strategy"]


def tune(spec: str, work_dir: str, args, warm_start=()) -> list:
    target = resolve_target("llvm", require_device=False).target
    tune_tir(parse_workload(spec).prim_func(), target, work_dir, args.trials, strategy="pruner", seed=args.seed,
             num_trials_per_iter=args.per_iter, progress=False, warm_start=list(warm_start))
    return latencies_us(work_dir)


def pair_row(source: str, new: str, args) -> dict:
    folder = os.path.join(args.work, f"{new.split(':')[0]}-{new.split(':')[1]}")
    source_dir, cold_dir, warm_dir = (os.path.join(folder, name) for name in ("source", "cold", "warm"))
    tune(source, source_dir, args)
    cold = tune(new, cold_dir, args)
    warm = tune(new, warm_dir, args, warm_start=[source_dir])
    log = first_round_log(warm_dir)
    picked = log.get("warm_picked", 0)
    warm_first, cold_first = best(warm[:args.per_iter]), best(cold[:args.per_iter])
    reached = next((i + 1 for i, v in enumerate(cold) if v is not None and v <= warm_first), None)
    again = remeasured_us([fastest(records_in_file_order(cold_dir)),
                           fastest(records_in_file_order(warm_dir)[:args.per_iter])], args.remeasure)
    return {"source": source, "new": new, "cold_first_round_us": cold_first, "warm_first_round_us": warm_first,
            "cold_best_us": best(cold), "warm_best_us": best(warm), "cold_trials": len(cold),
            "warm_adapted": log.get("warm_adapted", 0), "warm_valid": log.get("warm_valid", 0),
            "warm_picked": picked, "best_first_is_adapted": best(warm[:picked]) == warm_first if picked else False,
            "cold_trial_reaching_warm_first": reached, "remeasured_cold_best_us": again[0],
            "remeasured_warm_first_round_us": again[1]}


def table(rows) -> str:
    lines = ["| source -> new | cold round 0 (us) | warm round 0 (us) | cold best, all trials (us) | "
             "warm best (us) | adapted / valid / picked | warm round 0's best adapted | cold trial reaching it | "
             "again: cold best / warm round 0 (us) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| `{r['source']}` -> `{r['new']}` | {r['cold_first_round_us']:.1f} | "
                     f"{r['warm_first_round_us']:.1f} | {r['cold_best_us']:.1f} | {r['warm_best_us']:.1f} | "
                     f"{r['warm_adapted']} / {r['warm_valid']} / {r['warm_picked']} | "
                     f"{'yes' if r['best_first_is_adapted'] else 'no'} | "
                     f"{r['cold_trial_reaching_warm_first'] or 'not reached'} | "
                     f"{r['remeasured_cold_best_us']:.1f} / {r['remeasured_warm_first_round_us']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--per-iter", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--remeasure", type=int, default=5, help="batches of the side-by-side re-run (default 5)")
    parser.add_argument("--pairs", default=None, help="indices of PAIRS to run, e.g. 0,2 (default: all)")
    parser.add_argument("--work", default="/tmp/ms_pruner_transfer", help="work dirs (a rerun resumes them)")
    parser.add_argument("--out", default=None, help="JSON to write (a Markdown table goes to stdout)")
    args = parser.parse_args()
    chosen = [PAIRS[int(i)] for i in args.pairs.split(",")] if args.pairs else PAIRS
    rows = [pair_row(source, new, args) for source, new in chosen]
    print(table(rows))
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(), "commit": git_commit(),
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "settings": {"trials": args.trials, "per_iter": args.per_iter, "seed": args.seed},
                              "rows": rows, "table": table(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
