"""A seeded PrunerSearch, round by round, held to the picks recorded before the package was
reorganised (tests/data/golden_rounds.json): moving code must not move a single candidate.

The workload is the shared H100 database's (4096^3 fp16->fp32 matmul for nvidia/nvidia-h100); no
GPU is used: the latencies fed back are the analyzer's estimates, each scaled by a factor drawn from
the schedule's structural hash, so the verify model has something of its own to learn. Four rounds:
the cold round, the two follow-up slices, and an ordinary round that drafts and verifies with the
PaCM the earlier results trained. ptxas tie ordering is off, so nvcc on PATH changes nothing, and
the search runs on one thread: on more, which mutated children the draft skips as already met
depends on which thread meets them first.

Record anew (only when a change is meant to move the picks, and say so in its commit):
``python tests/test_golden_round.py --record``.
"""

import hashlib
import json
import os
import sys

import pytest

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "golden_rounds.json")
WORKLOAD = "matmul:4096x4096x4096:float16:float32"
THREADS = 1  # with more, the draft's children depend on thread timing (SeenDecisions is shared)


def _factor(sch) -> float:
    import tvm_ffi

    return 1.0 + 0.2 * (int(tvm_ffi.structural_hash(sch.mod)) % 11) / 10.0


def seeded_rounds(rounds: int = 4) -> list:
    """Each round's picks, in order, as the sha1 of their trace text and their kernel geometry."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from ms_pruner.analysis import StaticAnalyzer, geometry_name, kernel_geometry
    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.intrinsics import register_tensor_intrinsics
    from ms_pruner.search import FirstRoundConfig, PrunerConfig, PrunerSearch
    from ms_pruner.workloads import parse_workload

    register_tensor_intrinsics()
    strategy = PrunerSearch(PrunerConfig(cold_population=64, cold_genetic_iters=2, draft_size=64, population=128),
                            FirstRoundConfig(cold_ptxas_ties=0), seed=0)
    model = PaCM(seed=0)
    mod = tvm.IRModule({"main": parse_workload(WORKLOAD).prim_func()})
    context = ms.TuneContext(mod=mod, target=get_gpu_spec("h100").target(), space_generator="post-order-apply",
                             search_strategy=strategy, task_name="main", rand_state=0, num_threads=THREADS)
    context.pre_tuning(max_trials=64, num_trials_per_iter=16, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=model)
    analyzer = StaticAnalyzer.for_target(context.target)
    out = []
    for _ in range(rounds):
        picks = list(context.search_strategy.generate_measure_candidates() or [])
        estimates = [analyzer.estimate(c.sch.mod) for c in picks]
        out.append([{"trace_sha1": hashlib.sha1(str(c.sch.trace).encode()).hexdigest(),
                     "geometry": geometry_name(kernel_geometry(e.features))} for c, e in zip(picks, estimates)])
        results = [RunnerResult(run_secs=[e.latency_s * _factor(c.sch)], error_msg=None)
                   for c, e in zip(picks, estimates)]
        model.update(context, picks, results)
        context.search_strategy.notify_runner_results(picks, results)
    return out


@pytest.mark.slow
def test_a_seeded_search_picks_what_it_picked_before(tensor_intrinsics):
    with open(GOLDEN, encoding="utf-8") as handle:
        golden = json.load(handle)
    assert seeded_rounds(len(golden["rounds"])) == golden["rounds"]


if __name__ == "__main__" and "--record" in sys.argv:
    found = seeded_rounds()
    with open(GOLDEN, "w", encoding="utf-8") as handle:
        json.dump({"workload": WORKLOAD, "target": "h100", "rounds": found}, handle, indent=1)
        handle.write("\n")
    print(f"wrote {GOLDEN}: {[len(r) for r in found]} picks a round")
