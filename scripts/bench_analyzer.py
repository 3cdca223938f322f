"""Analyzer speed (one core) on 4096^3 fp16 tensor-core sketches, and its ranking on real data.

    python scripts/bench_analyzer.py --out docs/results/cpu/analyzer.json

Real data: the H100 databases in ../shared (scored as each GPU of --score-as) and the CPU records
PrunerSearch measured on the 2-core machine (tests/data/cpu_pruner_seed0, the CPU model's case).
``cpu_speed`` times the CPU model on those records' schedules, as PrunerSearch's draft meets them
on an ``llvm`` target: each schedule's fastest of ``--repeats`` estimates, the replay not counted.

    python scripts/bench_analyzer.py --parts cpu-speed --out ...

runs that part alone (a shared machine's noise shows in the mean, less in the fastest of five).

    python scripts/bench_analyzer.py --parts databases --db work/... --score-as h100 --score-as h100:warp_mma_share=1

is an analyzer ablation: each database scored with a spec and with one of its figures changed (here
the tensor rate at the datasheet peak instead of mma.sync's measured ceiling), Spearman, recall and
measured over estimated latency (the median, and the database's fastest record) side by side.
"""

import argparse
import glob
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import H100_MM4096, provenance, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--score-as", action="append", default=None,
                        help="GPU specs to score the databases with, repeatable (default h100,a100); a spec with "
                             "changed fields is one value: h100:warp_mma_share=1,l2_latency_cycles=300")
    parser.add_argument("--db", action="append", default=None, help="databases to score (default: ../shared)")
    parser.add_argument("--cpu-db", action="append", default=None,
                        help="llvm databases for this machine's CPU model (default: tests/data/cpu_pruner_seed0/*)")
    parser.add_argument("--out", default="docs/results/cpu/analyzer.json")
    parser.add_argument("--parts", default="speed,databases,cpu-databases,cpu-speed")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()

    result = provenance()
    cpu_paths = args.cpu_db or sorted(glob.glob(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "cpu_pruner_seed0", "*", "")))
    if "speed" in parts:
        result["speed"] = gpu_speed(args.gpu, args.candidates)
    if "databases" in parts:
        result["databases"] = score_gpu_databases(args.db or [H100_MM4096], score_as(args.score_as or ["h100,a100"]))
    if "cpu-databases" in parts:
        result["cpu_databases"] = score_cpu_databases(cpu_paths)
    if "cpu-speed" in parts:
        result["cpu_speed"] = cpu_speed(cpu_paths, args.repeats)
    print({k: v for k, v in result.items() if k in ("speed", "databases", "cpu_speed")},
          result.get("cpu_databases", {}).get("mean"))
    write_json(args.out, result)


def gpu_speed(gpu: str, candidates: int) -> dict:
    """Microseconds per estimate of freshly sampled 4096^3 fp16 tensor-core sketches (one core)."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    spec = get_gpu_spec(gpu)
    workload = parse_workload("matmul:4096x4096x4096:float16:float32")
    space = DesignSpace(workload.prim_func(), spec.target())
    mods = [s.mod for s in space.sample(candidates, seed=0)]
    analyzer = StaticAnalyzer.for_target(spec.target(), gpu=spec)
    analyzer.estimate(mods[0])
    times = []
    for mod in mods:
        start = time.perf_counter()
        analyzer.estimate(mod)
        times.append((time.perf_counter() - start) * 1e6)
    return {
        "workload": workload.spec,
        "gpu_spec": spec.name,
        "candidates": len(times),
        "us_mean": statistics.mean(times),
        "us_median": statistics.median(times),
        "us_p90": sorted(times)[int(0.9 * len(times))],
    }


def score_as(values) -> list:
    """The GPU specs ``--score-as`` names: each value one spec if it changes fields, else a comma list."""
    return [name for value in values for name in ([value] if ":" in value else value.split(","))]


def score_gpu_databases(databases, gpus) -> dict:
    from ms_pruner.evaluation import evaluate_database

    scored = {}
    for path in databases:
        if not os.path.isdir(path):
            continue
        for gpu in gpus:
            report = evaluate_database(path, gpu=gpu)
            both = [r for r in report.records if r.predicted_s and r.measured_s]
            best = min(both, key=lambda r: r.measured_s, default=None)
            scored[f"{os.path.relpath(path, os.getcwd())} as {gpu}"] = {
                "spearman": report.spearman,
                "recall_top10_in_top30": report.recall_top10_in_top30,
                "n_valid": report.n_valid,
                "records": len(report.records),
                "median_measured_over_estimate": statistics.median(r.measured_s / r.predicted_s for r in both)
                if both else None,
                "best_measured_us": best.measured_s * 1e6 if best else None,
                "best_estimate_us": best.predicted_s * 1e6 if best else None,
                "us_per_candidate_interleaved_with_replay": report.us_per_candidate,
            }
    return scored


def cpu_speed(paths, repeats: int) -> dict:
    """Microseconds per CPU-model estimate of the llvm records' schedules (fastest of ``repeats``)."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.evaluation.model_ranking import load_measured

    per_database, fastest = {}, []
    for path in paths:
        records, schedules, _ = load_measured(path)
        analyzer = StaticAnalyzer.for_target(records[0].target)
        best = [float("inf")] * len(schedules)
        for _ in range(repeats):
            for i, sch in enumerate(schedules):
                start = time.perf_counter()
                analyzer.estimate(sch.mod)
                best[i] = min(best[i], (time.perf_counter() - start) * 1e6)
        per_database[os.path.relpath(os.path.normpath(path), os.getcwd())] = {
            "candidates": len(best), "us_mean": statistics.mean(best), "us_median": statistics.median(best)}
        fastest.extend(best)
    return {"repeats": repeats, "candidates": len(fastest), "us_mean": statistics.mean(fastest),
            "us_median": statistics.median(fastest), "per_database": per_database}


def score_cpu_databases(paths):
    """Spearman, recall and how many distinct estimates the CPU model gives each llvm database."""
    from ms_pruner.evaluation import evaluate_database

    scored = {}
    for path in paths:
        report = evaluate_database(path)
        predicted = [r.predicted_s for r in report.records if r.predicted_s is not None]
        scored[os.path.relpath(os.path.normpath(path), os.getcwd())] = {
            "spearman": report.spearman,
            "recall_top10_in_top30": report.recall_top10_in_top30,
            "n_valid": report.n_valid,
            "distinct_estimates": len(set(predicted)),
            "us_per_candidate_interleaved_with_replay": report.us_per_candidate,
        }
    keys = ("spearman", "recall_top10_in_top30", "distinct_estimates")
    mean = {k: statistics.mean(v[k] for v in scored.values()) for k in keys} if scored else {}
    return {"mean": mean, "per_database": scored}


if __name__ == "__main__":
    main()
