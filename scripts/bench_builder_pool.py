"""Builder seconds per batch with a fresh worker pool each batch (MetaSchedule's LocalBuilder) and
with one pool kept across batches (``KeptPoolBuilder``), on tensor-core candidates, no GPU needed.

    python scripts/bench_builder_pool.py --out /tmp/builder_pool.json

Both build the same batches with the same build functions (``build_candidate``, nvcc to cubin where
nvcc is present), alternating fresh and kept batch by batch. The kept pool's workers are started
before its first batch and timed apart (``start_s``), as a tuning session starts them before its clock.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, write_json  # noqa: E402


def _built(results) -> dict:
    from ms_pruner.builder import device_module_formats

    formats = {f for r in results if not r.error_msg for f in device_module_formats(str(r.artifact_path))}
    return {"errors": sum(1 for r in results if r.error_msg), "formats": sorted(formats)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="matmul:4096x4096x4096:float16:float32")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--per-batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None, help="default: this machine's physical cores")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from ms_pruner.builder import build_candidate, default_max_workers, export_candidate
    from ms_pruner.builder.pool import KeptPoolBuilder
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    workers = args.workers or default_max_workers()
    target = get_gpu_spec(args.gpu).target()
    schedules = DesignSpace(parse_workload(args.workload).prim_func(), target).sample(
        args.batches * args.per_batch, seed=11)
    batches = [[BuilderInput(s.mod, target) for s in schedules[i * args.per_batch:(i + 1) * args.per_batch]]
               for i in range(args.batches)]
    fresh = ms.builder.LocalBuilder(max_workers=workers, timeout_sec=120.0, f_build=build_candidate,
                                    f_export=export_candidate)
    kept = KeptPoolBuilder(max_workers=workers, timeout_sec=120.0, f_build=build_candidate, f_export=export_candidate)
    start = time.perf_counter()
    kept.start_workers()
    start_s = time.perf_counter() - start
    rows = []
    for index, batch in enumerate(batches):
        row = {"batch": index, "candidates": len(batch)}
        for name, builder in (("fresh", fresh), ("kept", kept)):
            start = time.perf_counter()
            results = builder.build(batch)
            row[name] = dict(seconds=time.perf_counter() - start, **_built(results))
        rows.append(row)
        print(row)
    kept.close()
    write_json(args.out, {"command": command_line(), "machine": machine(), "workload": args.workload,
                          "target": str(target), "workers": workers, "start_s": start_s, "batches": rows})


if __name__ == "__main__":
    main()
