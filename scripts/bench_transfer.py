"""Transfer-tuning on this machine's CPU (``llvm``): Pruner's first round with ``--warm-start``
against a cold first round and against the cold run's 64-trial best, same seed.

    python scripts/bench_transfer.py --out docs/results/cpu/transfer_tuning.json

For each (source, new) pair of one operator kind, the source is tuned here first (Pruner, ``--trials``
trials, ``--per-iter`` a round, ``--source-seed``: the database a user already has); then for each of
``--seeds`` the new workload twice with the same settings, cold and with ``warm_start=[source work
dir]``. A run's first round is its first ``--per-iter`` records in measurement order. No test and
no default was tuned on these shapes (the tests adapt ``matmul:128x128x128`` to ``256x64x512`` and a
ResNet conv to ``1x28x28x32x64``). Reported per pair and seed: the best of each first round and of
each whole run as recorded, the warm start's adapted / valid / measured counts and whether the warm
first round's best was adapted. Timings on a shared 2-core machine drift by tens of percent between
runs, so the ``--again-top`` fastest records of the cold first round, of the cold run and of the
warm first round are then built once and run ``--remeasure`` times in turn (each its median): the
"again" columns compare the three at the same time. Work dirs go under ``--work``; a rerun resumes
them (tune_tir counts the records already there).
"""

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import provenance, write_json  # noqa: E402

from ms_pruner.database.records import is_valid, mean_latency, records_in_file_order  # noqa: E402
from ms_pruner.hardware import resolve_target  # noqa: E402
from ms_pruner.tuning import tune_tir  # noqa: E402
from ms_pruner.tuning.resume import ROUND_LOG, round_log  # noqa: E402
from ms_pruner.tuning.remeasure import remeasure  # noqa: E402
from ms_pruner.workloads import parse_workload  # noqa: E402

TARGET = resolve_target("llvm", require_device=False).target

PAIRS = (
    ("matmul:256x256x256:float32:float32", "matmul:384x192x128:float32:float32"),
    ("matmul_nt:128x256x256:float32:float32", "matmul_nt:256x128x384:float32:float32"),
    ("dense_bias_relu:128x256x128:float32:float32", "dense_bias_relu:64x512x256:float32:float32"),
    ("batch_matmul:4x64x128x64:float32:float32", "batch_matmul:8x128x64x128:float32:float32"),
    ("conv2d_nhwc:1x28x28x32x32k3s1p1:float32:float32", "conv2d_nhwc:1x14x14x64x64k3s1p1:float32:float32"),
)


def latencies_us(records) -> list:
    """Each record's mean latency in measurement order (None where it failed)."""
    return [mean_latency(r) * 1e6 if is_valid(r) else None for r in records]


def best(values) -> float:
    return min((v for v in values if v is not None), default=None)


def fastest(records, count: int) -> list:
    return sorted((r for r in records if is_valid(r)), key=mean_latency)[:count]


def first_round_log(work_dir: str) -> dict:
    return round_log(os.path.join(work_dir, ROUND_LOG))[0]["strategy"]


def tune(spec: str, work_dir: str, args, seed: int, warm_start=()) -> list:
    """The run's records in measurement order (tune_tir resumes a work dir that has them)."""
    tune_tir(parse_workload(spec).prim_func(), TARGET, work_dir, args.trials, strategy="pruner", seed=seed,
             num_trials_per_iter=args.per_iter, progress=False, warm_start=list(warm_start))
    return records_in_file_order(work_dir)


def again_us(groups, args) -> list:
    """The fastest of each group's ``--again-top`` records, built and run again together here
    (each the median of ``--remeasure`` runs)."""
    chosen = [fastest(group, args.again_top) for group in groups]
    measured = iter(remeasure([r for group in chosen for r in group], TARGET, repeats=args.remeasure))
    return [min(m.measured_s * 1e6 for m in [next(measured) for _ in group] if m.measured_s) for group in chosen]


def pair_row(source: str, new: str, seed: int, args) -> dict:
    folder = os.path.join(args.work, f"{new.split(':')[0]}-{new.split(':')[1]}")
    source_dir = os.path.join(folder, "source")
    cold_dir, warm_dir = (os.path.join(folder, f"{name}-s{seed}") for name in ("cold", "warm"))
    tune(source, source_dir, args, args.source_seed)
    cold = tune(new, cold_dir, args, seed)
    warm = tune(new, warm_dir, args, seed, warm_start=[source_dir])
    cold_us, warm_us, first = latencies_us(cold), latencies_us(warm), args.per_iter
    log = first_round_log(warm_dir)
    picked = log.get("warm_picked", 0)
    again = again_us([cold[:first], cold, warm[:first]], args)
    return {"source": source, "new": new, "seed": seed,
            "cold_first_round_us": best(cold_us[:first]), "warm_first_round_us": best(warm_us[:first]),
            "cold_best_us": best(cold_us), "warm_best_us": best(warm_us),
            "warm_adapted": log.get("warm_adapted", 0), "warm_valid": log.get("warm_valid", 0), "warm_picked": picked,
            "best_first_is_adapted": bool(picked) and best(warm_us[:picked]) == best(warm_us[:first]),
            "again_cold_first_round_us": again[0], "again_cold_best_us": again[1],
            "again_warm_first_round_us": again[2]}


def table(rows) -> str:
    lines = ["| source -> new | seed | recorded: cold round 0 / warm round 0 / cold best / warm best (us) | "
             "adapted / valid / picked, best adapted | again: cold round 0 / cold best / warm round 0 (us) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| `{r['source']}` -> `{r['new']}` | {r['seed']} | {r['cold_first_round_us']:.1f} / "
                     f"{r['warm_first_round_us']:.1f} / {r['cold_best_us']:.1f} / {r['warm_best_us']:.1f} | "
                     f"{r['warm_adapted']} / {r['warm_valid']} / {r['warm_picked']}, "
                     f"{'yes' if r['best_first_is_adapted'] else 'no'} | {r['again_cold_first_round_us']:.1f} / "
                     f"{r['again_cold_best_us']:.1f} / {r['again_warm_first_round_us']:.1f} |")
    return "\n".join(lines) + "\n" + summary_line(rows)


def summary_line(rows) -> str:
    def ratio(key):
        return math.exp(statistics.mean(math.log(r["again_warm_first_round_us"] / r[key]) for r in rows))
    faster_first = sum(r["again_warm_first_round_us"] < r["again_cold_first_round_us"] for r in rows)
    at_best = sum(r["again_warm_first_round_us"] <= r["again_cold_best_us"] for r in rows)
    return (f"\nRun again: the warm round 0's best beats the cold round 0's in {faster_first} of {len(rows)} runs "
            f"(geometric mean {ratio('again_cold_first_round_us'):.3f} of its time) and is at or below the cold "
            f"run's best over all its trials in {at_best} of {len(rows)} ({ratio('again_cold_best_us'):.3f}).\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--per-iter", type=int, default=16)
    parser.add_argument("--seeds", default="0,1", help="seeds of the new workload's runs (default 0,1)")
    parser.add_argument("--source-seed", type=int, default=0)
    parser.add_argument("--again-top", type=int, default=3, help="records of each group run again (default 3)")
    parser.add_argument("--remeasure", type=int, default=5, help="runs of each record run again (default 5)")
    parser.add_argument("--pairs", default=None, help="indices of PAIRS to run, e.g. 0,2 (default: all)")
    parser.add_argument("--work", default="/tmp/ms_pruner_transfer", help="work dirs (a rerun resumes them)")
    parser.add_argument("--out", default=None, help="JSON to write (a Markdown table goes to stdout)")
    args = parser.parse_args()
    chosen = [PAIRS[int(i)] for i in args.pairs.split(",")] if args.pairs else PAIRS
    rows = [pair_row(source, new, int(seed), args) for source, new in chosen for seed in args.seeds.split(",")]
    print(table(rows))
    if args.out:
        write_json(args.out, {**provenance(), "settings": vars(args), "rows": rows, "table": table(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
