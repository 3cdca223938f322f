"""Builder on tensor-core candidates, no GPU needed: lowering errors (ours vs stock) and nvcc builds;
with ``--pool``, seconds per batch with a fresh worker pool each batch (MetaSchedule's LocalBuilder)
against one pool kept across batches (``KeptPoolBuilder``).

    python scripts/bench_builder.py --out builder.json
    python scripts/bench_builder.py --pool --out builder_pool.json

With ``--pool`` both build the same batches with the same build functions (nvcc to cubin where nvcc
is present), alternating fresh and kept batch by batch; the kept pool's workers are started before
its first batch and timed apart (``start_s``), as a tuning session starts them before its clock.

    python scripts/bench_builder.py --shared-cubins WORKLOAD ... --out builder_shared_cubins.json

``--shared-cubins``: each batch is first compiled in this process as a cold round's ptxas tie order
compiles its ties (``first_kernel_resources``, on the workers' count of threads), then built by a
kept pool with the run's shared cubin folder (builder/cubin_cache.py) and by one with sharing off
(``make_builder(share_cubins=False)``, as ``MS_PRUNER_CUBIN_CACHE=0`` makes it), in alternating order batch by batch: the build seconds a slice of
picks the search compiled costs each way. docs/results/cpu/builder.tgz holds the three outputs.
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import provenance, workload_and_target, write_json  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="matmul:4096x4096x4096:float16:float32")
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--nvcc-builds", type=int, default=8)
    parser.add_argument("--pool", action="store_true", help="time a fresh pool a batch against a kept one")
    parser.add_argument("--gpu", default="h100", help="with --pool or --shared-cubins")
    parser.add_argument("--batches", type=int, default=3, help="with --pool or --shared-cubins")
    parser.add_argument("--per-batch", type=int, default=8, help="with --pool or --shared-cubins")
    parser.add_argument("--workers", type=int, default=None, help="with --pool; default: the physical cores")
    parser.add_argument("--shared-cubins", nargs="*", default=None, metavar="WORKLOAD",
                        help="build batches the search compiled with the run's shared cubins and without, for "
                             "these workloads (none named: --workload)")
    parser.add_argument("--space", default="auto", choices=("wmma", "mma", "all", "auto"),
                        help="with --shared-cubins: the tensor-core space sampled")
    parser.add_argument("--out", default="builder.json")
    args = parser.parse_args()

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()
    if args.pool:
        return pool_batches(args)
    if args.shared_cubins is not None:
        return shared_cubin_batches(args)
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    from ms_pruner.builder import lower_candidate
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    workload = parse_workload(args.workload)
    result = {**provenance(), "workload": workload.spec, "gpus": {}}
    for gpu in ("h100", "a100"):
        target = get_gpu_spec(gpu).target()
        schedules = DesignSpace(workload.prim_func(), target).sample(args.candidates, seed=11)
        ours = stock = 0
        stock_errors = {}
        start = time.perf_counter()
        for sch in schedules:
            try:
                lower_candidate(sch.mod, target)
            except Exception:  # pylint: disable=broad-except
                ours += 1
        ours_s = (time.perf_counter() - start) / len(schedules)
        for sch in schedules:
            try:
                default_build(sch.mod, target, None)
            except Exception as err:  # pylint: disable=broad-except
                stock += 1
                line = str(err).strip().splitlines()[-1][:120]
                stock_errors[line] = stock_errors.get(line, 0) + 1
        entry = {"candidates": len(schedules), "lowering_errors_ours": ours, "lowering_errors_stock": stock,
                 "stock_error_messages": stock_errors, "lower_s_per_candidate_ours": ours_s}
        if shutil.which("nvcc") and args.nvcc_builds:
            entry.update(nvcc_builds(schedules[: args.nvcc_builds], target))
        result["gpus"][gpu] = entry
        print(gpu, entry)
    write_json(args.out, result)


def nvcc_builds(schedules, target) -> dict:
    """Our builder on the candidates, compiled with nvcc: errors, wall time, the device modules' formats."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from ms_pruner.builder import make_builder

    builder = make_builder("pruner")
    start = time.perf_counter()
    built = builder.build([BuilderInput(s.mod, target) for s in schedules])
    wall = time.perf_counter() - start
    summary = _built(built)
    return {"nvcc_builds": len(built), "nvcc_build_errors": summary["errors"], "nvcc_build_wall_s": wall,
            "builder_workers": builder.max_workers, "artifact_formats": summary["formats"]}


def _built(results) -> dict:
    from ms_pruner.builder import device_module_formats

    formats = {f for r in results if not r.error_msg for f in device_module_formats(str(r.artifact_path))}
    return {"errors": sum(1 for r in results if r.error_msg), "formats": sorted(formats)}


def pool_batches(args):
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
    write_json(args.out, {**provenance(), "workload": args.workload,
                          "target": str(target), "workers": workers, "start_s": start_s, "batches": rows})


def shared_cubin_batches(args):
    import contextlib

    from ms_pruner.builder import default_max_workers, make_builder, run_cubin_cache

    workers = args.workers or default_max_workers()
    runs = []
    with run_cubin_cache():
        builders = {"shared": make_builder("pruner", max_workers=workers),
                    "apart": make_builder("pruner", max_workers=workers, share_cubins=False)}
        with contextlib.ExitStack() as stack:
            for builder in builders.values():
                builder.start_workers()
                stack.callback(builder.close)
            for spec in args.shared_cubins or [args.workload]:
                runs.append(_shared_cubin_run(argparse.Namespace(**{**vars(args), "workload": spec}), builders, workers))
    write_json(args.out, {**provenance(), "gpu": args.gpu, "space": args.space, "workers": workers, "runs": runs})


def _shared_cubin_run(args, builders: dict, workers: int) -> dict:
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.ptxas_ties import first_kernel_resources
    from ms_pruner.space import space_generator

    mod, target, space = workload_and_target(args)
    schedules = DesignSpace(mod, target, space=space_generator(space)).sample(args.batches * args.per_batch, seed=11)
    rows = []
    for index in range(args.batches):
        batch = schedules[index * args.per_batch:(index + 1) * args.per_batch]
        start = time.perf_counter()
        reports = first_kernel_resources([s.mod for s in batch], target, workers)
        row = {"batch": index, "candidates": len(batch), "search_compile_s": time.perf_counter() - start,
               "search_compiled": sum(1 for r in reports if r is not None)}
        for name in (("shared", "apart") if index % 2 == 0 else ("apart", "shared")):
            start = time.perf_counter()
            results = builders[name].build([BuilderInput(s.mod, target) for s in batch])
            row[name] = dict(seconds=time.perf_counter() - start, **_built(results))
        rows.append(row)
        print(args.workload, row)
    return {"workload": args.workload, "target": str(target), "space": space, "batches": rows}


if __name__ == "__main__":
    main()
