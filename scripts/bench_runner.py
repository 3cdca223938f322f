"""Runner seconds per candidate with MetaSchedule's per-candidate argument fill and with reused arguments,
and (``--fleet``) through a TVM RPC tracker with 1 and 2 servers on this machine.

    python scripts/bench_runner.py --out docs/results/cpu/runner_arguments.json
    python scripts/bench_runner.py --fleet --workload matmul:128x128x128:float32:float32 --out ...

Two measurements, both real, on whatever machine runs this:
1. ``LocalRunner`` (``make_runner``) timing the same ``--candidates`` built schedules of ``--workload``
   on ``llvm``, once with ``reuse_arguments=False`` (MetaSchedule's default: every candidate's
   arguments allocated and random-filled anew) and once with ``reuse_arguments=True``.
With ``--fleet`` the same batch goes through the local runner and through ``FleetRunner`` (MetaSchedule's
RPCRunner, one session a candidate) over a loopback tracker with 1 and then 2 servers: the batch's
seconds (a round's run phase) and their difference per candidate, the cost of measuring remotely.
2. The host-side fill of ``--gpu-workload``'s arguments: without cuRAND (the PyPI wheel) a CUDA
   runner fills each argument on the host CPU and copies it over, once per candidate by default;
   this times that fill on host tensors (the copy is not included; it needs a GPU).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import provenance, write_json  # noqa: E402


def _runner_seconds(runner, inputs) -> tuple:
    start = time.perf_counter()
    results = [future.result() for future in runner.run(inputs)]
    wall = time.perf_counter() - start
    errors = [r.error_msg.strip().splitlines()[-1][:200] for r in results if r.error_msg]
    seconds = [float(sum(r.run_secs) / len(r.run_secs)) for r in results if not r.error_msg]
    return wall, errors, seconds


def _built_inputs(workload_spec: str, candidates: int, seed: int):
    """(target, RunnerInputs of ``candidates`` sampled and built llvm schedules of the workload)."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import make_builder
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    target = llvm_target()
    mod = parse_workload(workload_spec).prim_func()
    schedules = DesignSpace(mod, target).sample(candidates, seed=seed)
    built = make_builder("pruner", max_workers=2).build([ms.builder.BuilderInput(s.mod, target) for s in schedules])
    args_info = ms.arg_info.ArgInfo.from_prim_func(mod)
    return target, [ms.runner.RunnerInput(str(b.artifact_path), "cpu", args_info) for b in built if not b.error_msg]


def time_fleet(workload_spec: str, candidates: int, seed: int, repeats: int) -> dict:
    import tempfile

    from ms_pruner.builder import make_runner
    from ms_pruner.tuning.fleet import LocalFleet, make_fleet_runner

    target, inputs = _built_inputs(workload_spec, candidates, seed)
    entry = {"workload": workload_spec, "target": str(target), "candidates": len(inputs), "repeats": repeats}
    runner = make_runner(reuse_arguments=True)
    _runner_seconds(runner, inputs[:1])
    entry["local"] = [_runner_seconds(runner, inputs)[0] for _ in range(repeats)]
    for servers in (1, 2):
        with tempfile.TemporaryDirectory() as logs, LocalFleet(logs, "bench", servers) as fleet:
            runner = make_fleet_runner(fleet.tracker, target)
            _runner_seconds(runner, inputs[:servers])  # each server's first session
            walls = [_runner_seconds(runner, inputs) for _ in range(repeats)]
            entry[f"rpc_{servers}"] = [wall for wall, _, _ in walls]
            entry[f"rpc_{servers}_errors"] = sorted({e for _, errors, _ in walls for e in errors})
    for key in ("local", "rpc_1", "rpc_2"):
        entry[f"{key}_batch_s_min"] = min(entry[key])
    entry["rpc_1_overhead_s_per_candidate"] = (entry["rpc_1_batch_s_min"] - entry["local_batch_s_min"]) / len(inputs)
    print(entry)
    return entry


def time_runner(workload_spec: str, candidates: int, seed: int) -> dict:
    from ms_pruner.builder import make_runner

    target, inputs = _built_inputs(workload_spec, candidates, seed)
    entry = {"workload": workload_spec, "target": str(target), "candidates": len(inputs)}
    for name, reuse in (("fresh", False), ("reuse", True)):
        runner = make_runner(reuse_arguments=reuse)
        _runner_seconds(runner, inputs[:1])  # the worker's first load (imports) counts for neither
        wall, errors, kernel = _runner_seconds(runner, inputs)
        entry[name] = {"runner_s_per_candidate": wall / len(inputs), "errors": errors,
                       "mean_kernel_s": sum(kernel) / max(1, len(kernel))}
        print(workload_spec, name, entry[name])
    return entry


def time_host_fill(workload_spec: str, repeats: int) -> dict:
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    from ms_pruner.workloads import parse_workload

    mod = parse_workload(workload_spec).prim_func()
    args_info = [info.as_json() for info in ms.arg_info.ArgInfo.from_prim_func(mod)]
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        default_alloc_argument(tvm.cpu(0), args_info, 1)
        seconds.append(time.perf_counter() - start)
    values = sum(int(np.prod(info[2])) for info in args_info)
    entry = {"workload": workload_spec, "values_per_candidate": values, "fill_s": seconds,
             "fill_s_min": min(seconds), "tvm_num_threads": os.environ.get("TVM_NUM_THREADS")}
    print("host fill", entry)
    return entry


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="matmul:4096x4096x16:float32:float32",
                        help="an llvm workload with large arguments and little compute")
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--gpu-workload", default="matmul:4096x4096x4096:float16:float32")
    parser.add_argument("--fill-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fleet", action="store_true", help="time the batch locally and through 1 and 2 RPC servers")
    parser.add_argument("--repeats", type=int, default=3, help="with --fleet: batches timed a set-up")
    parser.add_argument("--out", default="docs/results/cpu/runner_arguments.json")
    args = parser.parse_args()

    if args.fleet:
        write_json(args.out, {**provenance(),
                              "fleet": time_fleet(args.workload, args.candidates, args.seed, args.repeats)})
        return
    result = {**provenance(),
              "llvm_runner": time_runner(args.workload, args.candidates, args.seed),
              "host_fill": time_host_fill(args.gpu_workload, args.fill_repeats)}
    write_json(args.out, result)


if __name__ == "__main__":
    main()
