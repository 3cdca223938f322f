"""Search overhead per round on a tensor-core workload, stock MetaSchedule vs PrunerSearch, no GPU.

    python scripts/bench_search.py --out docs/results/cpu/search_overhead.json

One round of candidate generation (64 candidates, the tune_tir default) for the workload of a real
H100 database (`matmul 4096^3 fp16->fp32`, target nvidia/nvidia-h100), timed twice per strategy:
``cold`` (empty database, untrained cost model: round 0 of a run) and ``warm`` (the database's
real measured records committed and the cost model updated with them, as after three rounds),
where ``--warm-rounds`` rounds are generated back to back. Nothing is measured, and no latency is
made up: between warm rounds the strategy is told each candidate failed with "not measured", which
only marks it as tried (PrunerSearch then carries its unpicked draft over, as in a real run).
Stock is MetaSchedule's ``evolutionary`` search with its ``xgb`` model; Pruner is PrunerSearch with
PaCM, both as ``ms-pruner tune --strategy stock|pruner`` builds them, with the same thread count.
The figures are search seconds (what a round log's ``search_s`` counts on a GPU host), plus
cost-model update seconds for the warm case.

Where PrunerSearch's cold round measures part of its batch (on a GPU target, docs/search.md), its
follow-up rounds (``follow_up_slices``) are timed too. They need one measured schedule whose Droplet
neighbours they build, so the strategy is told that the pick the analyzer estimates fastest ran in
its estimated time (a stand-in that only decides whose neighbours are built; the other picks are
"not measured").

    python scripts/bench_search.py --workload conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32 --gpu h100

times only the cold round of a workload that has no measured database (the warm case needs one).
``--ptxas`` compiles every round's picks with nvcc after the round's clock and reports their
registers against the analyzer's (``pick_registers``; docs/analyzer.md, section 3).

``--db`` may also be an ``llvm`` database (``tests/data/cpu_pruner_seed0/<workload>``, with
``--per-iter 16``): the same rounds on this machine's CPU target.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (H100_MM4096, add_workload_arguments, parse_params, pick_register_checks, provenance,  # noqa: E402
                     pruner_search, searched_source, resolved_space, tune_context, workload_and_target, write_json)


NOT_MEASURED = "not measured (search-overhead benchmark)"


def search_rounds(strategy: str, mod, target, records, schedules, latency, warm: bool, seed: int, threads: int,
                  per_iter: int, rounds: int, params: dict, ptxas: bool = False, space=None):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from ms_pruner.tuning.driver import search_components
    from ms_pruner.database.records import measured_batch

    strategy_obj, model = search_components(strategy, target, seed=seed)
    if params and strategy == "pruner":
        strategy_obj = pruner_search(seed, params)
    if isinstance(strategy_obj, str):
        strategy_obj = ms.SearchStrategy.create(strategy_obj)
    if isinstance(model, str):
        model = ms.CostModel.create(model, num_tuning_cores=threads)
    context = tune_context(mod, target, strategy_obj, seed, threads, space)
    database = ms.database.MemoryDatabase()
    entry = {"strategy": strategy, "state": "warm" if warm else "cold", "records": 0, "update_s": 0.0}
    if warm:
        workload = database.commit_workload(mod)
        for record in records:
            database.commit_tuning_record(ms.database.TuningRecord(record.trace, workload, record.run_secs,
                                                                   record.target, record.args_info))
        candidates, results = measured_batch(schedules, latency)
        start = time.perf_counter()
        model.update(context, candidates, results)
        entry["update_s"] = time.perf_counter() - start
        entry["records"] = len(records)
    spaces = context.generate_design_space()
    start = time.perf_counter()
    context.pre_tuning(max_trials=len(records) + 8 * per_iter, num_trials_per_iter=per_iter, design_spaces=spaces,
                       database=database, cost_model=model)
    entry["pre_tuning_s"] = time.perf_counter() - start
    entry["rounds"] = []
    planned = rounds if warm else 1
    while len(entry["rounds"]) < planned:
        start = time.perf_counter()
        candidates = list(context.search_strategy.generate_measure_candidates() or [])
        seconds = time.perf_counter() - start
        split = getattr(strategy_obj, "timings", None)
        entry["rounds"].append({"search_s": seconds, "candidates": len(candidates),
                                "split": {k: round(v, 3) if isinstance(v, float) else v
                                          for k, v in split[-1].items()} if split else None})
        if ptxas:
            entry["rounds"][-1]["registers"] = pick_registers(candidates, target)
        results = [RunnerResult(run_secs=None, error_msg=NOT_MEASURED) for _ in candidates]
        if not warm and split and split[-1].get("follow_up_due"):
            planned += 1  # a round that left part of its batch to a follow-up round: time that one as well
            if len(entry["rounds"]) == 1:
                stand_in = _best_estimated(candidates, target)
                results[stand_in[0]] = RunnerResult(run_secs=[stand_in[1]], error_msg=None)
        context.search_strategy.notify_runner_results(candidates, results)
    return entry


def pick_registers(candidates, target) -> dict:
    """Each pick's (first) kernel compiled after the search's clock: [the analyzer's registers,
    ptxas's, whether ptxas spills]. ``squeezed`` counts the kernels ptxas fits in fewer registers
    than the analyzer counts without spilling, where the analyzer's count is within the cap (for 16
    accumulator fragments a warp, nvcc's 167-196 against the analyzer's 184-192: on the H100 those
    measured 1.5-2.2x their estimate, docs/analyzer.md, section 3)."""
    from ms_pruner.analysis import StaticAnalyzer

    analyzer = StaticAnalyzer.for_target(target)
    estimates = [analyzer.estimate(candidate.sch.mod) for candidate in candidates]
    picks, squeezed = [], 0
    for check in pick_register_checks(candidates, estimates, target, analyzer):
        if check is not None:
            picks.append([int(check.regs_estimate), check.regs_ptxas, check.spill_ptxas])
            squeezed += check.regs_ptxas < check.regs_estimate and not (check.spill_estimate or check.spill_ptxas)
    return {"estimate_ptxas_spill": picks, "squeezed": int(squeezed)}


def _best_estimated(candidates, target):
    """(index, estimated seconds) of the candidate the analyzer estimates fastest."""
    from ms_pruner.analysis import StaticAnalyzer

    analyzer = StaticAnalyzer.for_target(target)
    estimates = [analyzer.estimate(c.sch.mod).latency_s for c in candidates]
    best = min(range(len(estimates)), key=estimates.__getitem__)
    return best, estimates[best]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=H100_MM4096)
    add_workload_arguments(parser)
    parser.add_argument("--out", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-iter", type=int, default=64)
    parser.add_argument("--strategies", default="stock,pruner")
    parser.add_argument("--warm-rounds", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                        help="another PrunerSearch parameter (docs/search.md), e.g. skip_seen_children=0")
    parser.add_argument("--ptxas", action="store_true",
                        help="compile each round's picks with nvcc and report their registers (pick_registers)")
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()  # the database's traces name the wmma intrinsics

    from ms_pruner.builder import default_max_workers
    from ms_pruner.evaluation.model_ranking import load_measured

    if args.workload:
        records, schedules, latency = [], [], []
        (mod, target, space), states = workload_and_target(args), (False,)
    else:
        records, schedules, latency = load_measured(args.db)
        mod, states = records[0].workload.mod, (False, True)
        target, space = resolved_space(args, mod, records[0].target)
    threads = default_max_workers()
    params = parse_params(args.set)
    rounds = []
    for strategy in args.strategies.split(","):
        for warm in states:
            entry = search_rounds(strategy, mod, target, records, schedules, latency, warm, args.seed, threads,
                                  args.per_iter, args.warm_rounds, params, args.ptxas, space)
            searched = ", ".join(f"{r['search_s']:.1f} s ({r['candidates']}"
                                 + (f", {r['registers']['squeezed']} squeezed" if "registers" in r else "") + ")"
                                 for r in entry["rounds"])
            print(f"{strategy:6s} {entry['state']}: search per round {searched}; "
                  f"model update {entry['update_s']:.1f} s on {entry['records']} records", flush=True)
            rounds.append(entry)
    payload = dict({**provenance(), "threads": threads},
                   **searched_source(args, target), per_iter=args.per_iter, params=params, runs=rounds)
    if args.out:
        write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
