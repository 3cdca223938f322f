"""Fresh tensor-core samples: how many random draws VerifyGPUCode rejects, and the two samplers' cost.

    python scripts/bench_sampling.py --out docs/results/cpu/screen/sampling.json

For each workload (H100 target, no GPU needed): ``--draws`` random draws replayed as MetaSchedule's
sampler replays them (fresh decisions, then each postprocessor in turn), with the seconds of the
replay and of each postprocessor and which one rejected the draw; then ``--count`` valid schedules
from the screened sampler (search/screen.py: its seconds and counts), and one pass of MetaSchedule's
C++ sampler (``SampleInitPopulation`` with 512 attempts: its seconds and how many were valid).
"""

import argparse
import collections
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, screened_space, write_json  # noqa: E402

WORKLOADS = ("matmul:4096x4096x4096:float16:float32", "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32")


def random_draws(space, draws: int, seed: int) -> dict:
    from tvm.s_tir.schedule import Schedule, Trace

    rng = random.Random(seed)
    seconds, rejected = collections.Counter(), collections.Counter()
    valid = 0
    for _ in range(draws):
        sketch = space.sketches[rng.randrange(len(space.sketches))]
        sch = Schedule(space.mod, seed=rng.randrange(1, 1 << 30), error_render_level="none")
        start = time.perf_counter()
        try:
            Trace(sketch.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # pylint: disable=broad-except
            rejected["trace"] += 1
            continue
        finally:
            seconds["replay"] += time.perf_counter() - start
        sch.enter_postproc()
        for postproc in space.postprocs:
            name = type(postproc).__name__
            start = time.perf_counter()
            try:
                ok = postproc.apply(sch)
            except Exception:  # pylint: disable=broad-except
                ok = False
            seconds[name] += time.perf_counter() - start
            if not ok:
                rejected[name] += 1
                break
        else:
            valid += 1
    return {"draws": draws, "valid": valid, "rejected_by": dict(rejected), "seconds": dict(seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", default=None)
    parser.add_argument("--draws", type=int, default=150)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.hardware import get_gpu_spec

    target = get_gpu_spec("h100").target()
    result = {"command": command_line(), "machine": machine(), "threads": args.threads, "workloads": {}}
    for spec in args.workload or WORKLOADS:
        context, space, _, sampler = screened_space(spec, target, args.threads)
        entry = {"random_draws": random_draws(space, args.draws, seed=0)}
        start = time.perf_counter()
        found = sampler.sample(args.count, random.Random(0))
        entry["screened"] = {"valid": len(found), "seconds": time.perf_counter() - start, **sampler.stats}
        evolution = ms.search_strategy.EvolutionarySearch(population_size=512, init_measured_ratio=0.0,
                                                          init_min_unmeasured=16, genetic_num_iters=1)
        evolution._initialize_with_tune_context(context)  # pylint: disable=protected-access
        evolution.pre_tuning(64, 64, context.space_generator.generate_design_space(context.mod),
                             database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
        start = time.perf_counter()
        got = ms._ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(evolution, 512)  # pylint: disable=protected-access
        entry["cpp_sampler"] = {"attempts_a_pass": 512, "valid": len(got), "seconds": time.perf_counter() - start}
        result["workloads"][spec] = entry
        print(spec, entry, flush=True)
    write_json(args.out, result)


if __name__ == "__main__":
    main()
