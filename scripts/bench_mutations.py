"""Mutated tensor-core schedules: how many MetaSchedule's mutators break VerifyGPUCode, and how many
of those the screen would drop unreplayed.

    python scripts/bench_mutations.py --out docs/results/cpu/screen/mutations.json

For each workload (H100 target, no GPU needed): the screened sampler (search/screen.py) draws
``--parents`` valid schedules, fitting its screen as a cold round does. Each parent then gets
``--children`` mutations as EvolutionarySearch makes them: a mutator drawn by the space's
probabilities (MutateTileSize, MutateUnroll, MutateThreadBinding, ...) applied through
MetaSchedule's own ``MutatorApply``, the child replayed through every postprocessor. Beside each
outcome (mutation failed, rejected before VerifyGPUCode, rejected by it, valid) stands the screen's
verdict on the child's trace (``ScreenedSampler.screens``): what an evolution that screened its
children would skip, and what it would lose. Counts, and seconds per replay (which depend on the
machine and on what runs beside).
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


def mutate(space, sampler, analyzer, parents, children: int, rng: random.Random) -> dict:
    """Per mutator: how its children ended and what the screen said of them."""
    from tvm.s_tir import meta_schedule as ms

    mutators = list(space.mutator_probs)
    weights = [space.mutator_probs[m] for m in mutators]
    jobs = []  # (mutator name, child trace)
    counts = collections.defaultdict(collections.Counter)
    for parent in parents:
        for _ in range(children):
            mutator = rng.choices(mutators, weights=weights)[0]
            name = type(mutator).__name__
            child = ms._ffi_api.MutatorApply(mutator, parent.trace, rng.randrange(1, 1 << 30))  # pylint: disable=protected-access
            if child is None:
                counts[name]["mutation_failed"] += 1
                continue
            jobs.append((name, child))
    seeds = [rng.randrange(1, 1 << 30) for _ in jobs]
    start = time.perf_counter()
    results = space.on_threads(lambda trace, seed: space.replay_checked(trace, seed, analyzer),
                               [trace for _, trace in jobs], seeds)
    seconds = time.perf_counter() - start
    for (name, trace), (sch, measures) in zip(jobs, results):
        outcome = "valid" if sch is not None else ("rejected_by_verify" if measures else "rejected_before_verify")
        counts[name][outcome] += 1
        verdict = sampler.screens(trace.simplified(remove_postproc=True))
        counts[name][f"{outcome}_screened"] += int(bool(verdict))
        counts[name]["unmatched"] += int(verdict is None)
    total = collections.Counter()
    for per_mutator in counts.values():
        total.update(per_mutator)
    return {"replayed": len(jobs), "replay_seconds": seconds, "by_mutator": {k: dict(v) for k, v in counts.items()},
            "total": dict(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", default=None)
    parser.add_argument("--parents", type=int, default=32)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()

    from ms_pruner.hardware import get_gpu_spec

    target = get_gpu_spec("h100").target()
    result = {"command": command_line(), "machine": machine(), "threads": args.threads, "parents": args.parents,
              "children": args.children, "workloads": {}}
    for spec in args.workload or WORKLOADS:
        _, space, analyzer, sampler = screened_space(spec, target, args.threads)
        rng = random.Random(args.seed)
        parents = sampler.sample(args.parents, rng)
        entry = {"mutator_probs": {type(m).__name__: p for m, p in space.mutator_probs.items()},
                 "sampler": dict(sampler.stats), **mutate(space, sampler, analyzer, parents, args.children, rng)}
        result["workloads"][spec] = entry
        print(spec, entry["total"], f"{entry['replay_seconds']:.1f} s", flush=True)
    write_json(args.out, result)


if __name__ == "__main__":
    main()
