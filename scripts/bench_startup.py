"""What a tuning call spends before its clock starts, and what its first round's search holds.

    python scripts/bench_startup.py --out docs/results/cpu/startup.json

Creating the builder and the runner starts a worker process for each, to check their functions:
process start-up that every strategy pays alike, and every resumed call again. The round clock
starts after them (tuning/driver.py), so round 0's search should be the strategy's own parts plus
MetaSchedule's task set-up, not those seconds. This times ``make_builder("pruner")`` and
``make_runner()`` alone, then one real ``tune_tir`` on ``llvm`` (a small matmul, two rounds) and
reports each round's search against the sum of the strategy's timed parts.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, write_json  # noqa: E402


def creation_seconds() -> dict:
    from ms_pruner.builder import make_builder, make_runner

    start = time.perf_counter()
    make_builder("pruner")
    built = time.perf_counter()
    make_runner()
    return {"make_builder_s": built - start, "make_runner_s": time.perf_counter() - built}


def first_rounds(spec: str, strategy: str, trials: int, per_iter: int) -> list:
    from ms_pruner.hardware import llvm_target
    from ms_pruner.tuning import tune_tir
    from ms_pruner.tuning.compare import STRATEGY_PARTS
    from ms_pruner.workloads import parse_workload

    with tempfile.TemporaryDirectory() as work_dir:
        result = tune_tir(parse_workload(spec).prim_func(), llvm_target(), work_dir, trials, strategy=strategy,
                          num_trials_per_iter=per_iter, progress=False, seed=0)
    return [{"round": r["round"], "search_s": r["search_s"],
             "strategy_parts_s": sum(r["strategy"].get(k, 0.0) for k in STRATEGY_PARTS) if r["strategy"] else None}
            for r in result.rounds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="matmul:64x64x64:float32:float32")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--per-iter", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()  # imported before any clock, as tune_tir's callers do

    created = creation_seconds()
    print(f"make_builder {created['make_builder_s']:.1f} s, make_runner {created['make_runner_s']:.1f} s", flush=True)
    runs = {}
    for strategy in ("stock", "pruner"):
        runs[strategy] = first_rounds(args.workload, strategy, args.trials, args.per_iter)
        for r in runs[strategy]:
            parts = f", strategy parts {r['strategy_parts_s']:.1f} s" if r["strategy_parts_s"] is not None else ""
            print(f"{strategy} round {r['round']}: search {r['search_s']:.1f} s{parts}", flush=True)
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(), "workload": args.workload,
                              "trials": args.trials, "per_iter": args.per_iter, **created, "rounds": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
