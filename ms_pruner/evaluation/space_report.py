"""``ms-pruner space``: a design space as a user inspects it, built without a GPU.

Sketches per rule family, N sampled candidates (with what the postprocessors rejected on the way),
and with ``build`` each candidate lowered as the builder lowers it and compiled with nvcc: its build
status, the tensor intrinsics it uses, the SASS instruction counts that show which hardware path it
takes (HMMA, LDSM, LDGSTS; LDL/STL for spills), the shared memory the compiled kernel allocates
(TVM's dynamic allocation plus ptxas's static one) and what the analyzer predicted of it from the
schedule before lowering: shared bytes, registers, spill; with ``emulate`` whether each candidate's
kernels compute the workload (ms_pruner.emulator).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time
from typing import Dict, List

from ..analysis import StaticAnalyzer
from ..analysis.geometry import geometry_name, kernel_geometry
from ..analysis.gpu_model import uses_local_memory
from ..analysis.issue_bound import issue_latencies, kernel_issue_floors, with_issue_floor
from ..emulator import EmulatedChecker
from ..builder import cuda_sources, default_max_workers
from ..builder.parity_unroll import PRAGMA as PARITY_PRAGMA
from ..builder.resources import allocated_shared_bytes, cuda_source_compile
from ..builder.sass import opcode_counts, opcodes, read_sass, tensor_kernel_counts
from ..builder.sass_issue import main_loop_issue
from ..builder.worker import lowered_tir
from ..errors import UserError
from ..hardware import resolve_target
from ..search.droplet import tile_decisions
from ..search.space import DesignSpace
from ..space.families import SPACES, pipeline_depth, sketch_family, tensor_instruction, tuning_space
from ..threads import map_on_threads
from ..tuning.driver import normalized_mod
from ..workloads import parse_workload

SASS_SHOWN = ("HMMA", "LDSM", "LDGSTS", "LDG", "STS", "LDL", "STL")
# A postprocessor written in Python reaches Python back from the space as TVM's wrapper type; the
# spaces here hold one such.
POSTPROC_NAMES = {"_PyPostproc": "PermutedLayoutCheck"}


@dataclasses.dataclass(frozen=True)
class SpaceQuery:
    """What ``ms-pruner space`` is asked: a workload, a GPU, a space choice, how many samples."""

    workload: str
    gpu: str = "h100"
    space: str = "auto"
    sample: int = 8
    build: bool = False
    seed: int = 0
    jobs: int = 1
    emulate: bool = False  # each candidate's kernels run by the emulator against the exact result


def sample_with_verdicts(space, count: int, seed: int):
    """(up to ``count`` distinct valid schedules, {"drawn", "valid", "duplicates", "rejected": {why: n}})
    from ``DesignSpace.sample`` (MetaSchedule's draws: a random sketch, fresh decisions), in at most
    40 draws a schedule asked, each rejection named by the postprocessor that made it."""
    verdicts: Dict = {}
    found = space.sample(count, seed, max_attempts=40 * count + 40, verdicts=verdicts)
    rejected = collections.Counter()
    for why, times in verdicts["rejected"].items():
        rejected[POSTPROC_NAMES.get(why, why)] += times
    return found, {"drawn": verdicts["drawn"], "valid": verdicts["drawn"] - sum(rejected.values()),
                   "duplicates": verdicts["duplicates"], "rejected": dict(sorted(rejected.items()))}


def tensor_intrinsics(trace) -> List[str]:
    """The tensor intrinsics a trace asks for (``meta_schedule.auto_tensorize``), in order, once each."""
    names = []
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]).startswith("meta_schedule.auto_tensorize"):
            name = str(inst.inputs[1])
            if name not in names:
                names.append(name)
    return names


def describe(sch, analyzer, estimate=None) -> dict:
    """What the schedule is and what the analyzer predicts of it (``estimate``, its Estimate where
    already made), before anything is lowered."""
    estimate = estimate if estimate is not None else analyzer.estimate(sch)
    features = estimate.features
    spec = analyzer.hardware
    return {
        "family": sketch_family(sch.trace),
        "instruction": tensor_instruction(sch.trace),
        "pipeline_depth": pipeline_depth(sch.trace),
        "unroll_max_step": max((f.unroll_max_step for f in features), default=0),
        "geometry": geometry_name(kernel_geometry(features)),
        "tiles": [list(t) for t in tile_decisions(sch.trace)],
        "intrinsics": tensor_intrinsics(sch.trace),
        "analyzer_valid": estimate.valid,
        "analyzer_latency_us": estimate.latency_s * 1e6 if estimate.valid else None,
        "analyzer_shared_bytes": int(max((f.smem_per_block for f in features), default=0)),
        "analyzer_registers": round(max((f.regs_per_thread for f in features), default=0.0), 1),
        "analyzer_spills": any(uses_local_memory(f, spec) for f in features),
        "analyzer_synchronous_copies": sum(c.synchronous for f in features for c in f.copies),
        "analyzer_epilogue_inputs": sum(f.epilogue_inputs for f in features if f.mma_count),
        "analyzer_parity_unrolled": any(f.parity_unrolled for f in features),
        "accumulator_bytes": int(max((f.acc_fragments_per_warp * f.mma_m * f.mma_n * f.acc_dtype_bytes / spec.warp_size
                                      for f in features), default=0)),
    }


def build_report(sch, target, estimate=None, spec=None) -> dict:
    """Lower ``sch`` as the builder does, compile it with nvcc and read what came out; given the
    analyzer's ``estimate`` of it and its GPUSpec, also how a lone warp issues each kernel's main
    loop and the issue floor that sets the estimate (``issue_floor``)."""
    started = time.perf_counter()
    try:
        sources = cuda_sources(sch.mod, target, use_nvcc=False)
        dynamic = allocated_shared_bytes(lowered_tir(sch.mod, target))
        counts: Dict[str, int] = collections.Counter()
        tensor_ldg = 0
        hmma_shapes: Dict[str, int] = collections.Counter()
        kernels, issues = [], []
        for source in sources:
            cubin, resources = cuda_source_compile(source, str(target.attrs["arch"]))
            listing = read_sass(cubin)
            counts.update(opcode_counts(listing))
            tensor_ldg += tensor_kernel_counts(listing)["LDG"]
            hmma_shapes.update(op.split(".")[1] for op in opcodes(listing) if op.startswith("HMMA."))
            kernels.extend(resources)
            if spec is not None:
                issues.extend(main_loop_issue(listing, *issue_latencies(spec)))
    except Exception as err:  # pylint: disable=broad-except
        lines = [line for line in str(err).splitlines() if line.strip()]
        return {"status": "error", "error": lines[-1] if lines else type(err).__name__,
                "build_s": round(time.perf_counter() - started, 2)}
    static = max((k.static_smem_bytes for k in kernels), default=0)
    return {
        "status": "built",
        "build_s": round(time.perf_counter() - started, 2),
        "sass": {name: int(counts.get(name, 0)) for name in SASS_SHOWN},
        "hmma_shapes": dict(sorted(hmma_shapes.items())),
        "tensor_kernel_ldg": tensor_ldg,
        "kernels": len(kernels),
        "shared_bytes": int(max(dynamic, default=0) + static),
        "registers": max((k.registers for k in kernels), default=0),
        "spill_bytes": sum(k.spill_store_bytes + k.spill_load_bytes for k in kernels),
        "stack_bytes": max((k.stack_bytes for k in kernels), default=0),
        "parity_unrolled": any(PARITY_PRAGMA in source for source in sources),
        **(issue_floor(estimate, issues, spec) if estimate is not None and spec is not None else {}),
    }


def issue_floor(estimate, issues: List, spec) -> dict:
    """The MMA kernel's main loop as a lone warp issues it (``builder.sass_issue``: cycles a trip,
    of them waiting on loads beyond the stall counts) and its issue floor; the estimate with each
    kernel lifted to its floor (docs/compiled.md). Empty where no kernel has an MMA loop."""
    floors = kernel_issue_floors(estimate, issues, spec)
    paired = [(issue, floor) for issue, floor in zip(issues, floors) if issue is not None and floor is not None]
    if not paired:
        return {}
    issue, floor = max(paired, key=lambda pair: pair[0].mma_flops)
    lifted = sum(with_issue_floor(k.latency_s, f) for k, f in zip(estimate.kernels, floors))
    return {"warp_trip_cycles": round(issue.trip_cycles, 1), "warp_trip_wait_cycles": round(issue.wait_cycles, 1),
            "issue_floor_us": floor * 1e6, "analyzer_latency_with_floor_us": lifted * 1e6}


def register_spill(candidate: dict) -> bool:
    """Whether ptxas moved registers to local memory for want of them: spill stores or loads, or a
    stack frame at least the size of a thread's accumulator array (ptxas moves a whole array that
    does not fit to the stack without calling it a spill). A smaller stack at fewer registers than
    allowed holds something else (``stack_bytes`` stays in the report)."""
    return candidate["spill_bytes"] > 0 or (candidate["stack_bytes"] > 0 and
                                            candidate["stack_bytes"] >= candidate["accumulator_bytes"])


def space_report(query: SpaceQuery) -> dict:
    """The report ``ms-pruner space`` prints (its JSON form)."""
    if query.sample < 0:
        raise UserError(f"--sample must be 0 or more, not {query.sample}")
    workload = parse_workload(query.workload)
    choice = resolve_target(query.gpu, require_device=False)
    if not choice.is_cuda:
        raise UserError(f"--gpu {query.gpu}: the space of a CUDA GPU is shown; give its name, TVM tag or target")
    gpu = choice.gpu
    mod = normalized_mod(workload.prim_func())
    resolved, target, generator = tuning_space(query.space, mod, choice.target)
    space = DesignSpace(mod, target, space=generator)
    sketches = collections.Counter(sketch_family(s) or "other" for s in space.sketches)
    depths = sorted({d for d in map(pipeline_depth, space.sketches) if d is not None})
    schedules, sampling = sample_with_verdicts(space, query.sample, query.seed)
    analyzer = StaticAnalyzer.for_target(target, gpu=gpu)
    estimates = [analyzer.estimate(sch) for sch in schedules]
    candidates = [describe(sch, analyzer, estimate) for sch, estimate in zip(schedules, estimates)]
    if query.build:
        built = map_on_threads(lambda pair: build_report(pair[0], target, pair[1], analyzer.hardware),
                               list(zip(schedules, estimates)), threads=query.jobs)
        for candidate, result in zip(candidates, built):
            candidate.update(result)
            if result["status"] == "built":
                candidate["spills"] = register_spill(candidate)
    if query.emulate:
        checker = EmulatedChecker(workload, target)
        checked = map_on_threads(lambda sch: checker.check(sch.mod).as_json(), schedules, threads=query.jobs)
        for candidate, result in zip(candidates, checked):
            candidate["emulated"] = result
    report = {
        "workload": workload.spec, "gpu": gpu.name, "space": query.space, "resolved_space": resolved,
        "max_shared_memory_per_block": int(target.attrs.get("max_shared_memory_per_block", 0)),
        "sketches": dict(sorted(sketches.items())), "sketch_pipeline_depths": depths,
        "sampled": len(schedules), "sampling": sampling,
        "variety": {"geometries": len({c["geometry"] for c in candidates}),
                    "families": dict(collections.Counter(c["family"] or "other" for c in candidates)),
                    "pipeline_depths": sorted({c["pipeline_depth"] for c in candidates if c["pipeline_depth"]})},
        "built": sum(c.get("status") == "built" for c in candidates),
        "errors": sum(c.get("status") == "error" for c in candidates),
        "candidates": candidates,
    }
    if query.build:
        report["analyzer_agreement"] = agreement(candidates)
    if query.emulate:
        report["emulated"] = dict(collections.Counter(c["emulated"]["status"] for c in candidates))
    return report


def agreement(candidates: List[dict]) -> dict:
    """How often the analyzer's shared bytes, spill call and (mma family: every copy is a cp.async
    but a gathered one) synchronous copies match the compiled kernels'."""
    built = [c for c in candidates if c.get("status") == "built"]
    mma = [c for c in built if c["family"] == "mma"]
    return {
        "built": len(built),
        "shared_bytes_exact": sum(c["analyzer_shared_bytes"] == c["shared_bytes"] for c in built),
        "spill_agrees": sum(c["analyzer_spills"] == c["spills"] for c in built),
        "spilling": sum(c["spills"] for c in built),
        "mma_synchronous_copy_agrees": sum(_global_loads_predicted(c) == (c["tensor_kernel_ldg"] > 0) for c in mma),
        "mma_with_synchronous_copies": sum(c["tensor_kernel_ldg"] > 0 for c in mma),
        "parity_unrolled": sum(c["parity_unrolled"] for c in built),
        "parity_unroll_agrees": sum(c["analyzer_parity_unrolled"] == c["parity_unrolled"] for c in built),
        "with_issue_floor": sum("issue_floor_us" in c for c in built),
        "lifted_by_issue_floor": sum(c["analyzer_latency_with_floor_us"] > c["analyzer_latency_us"]
                                     for c in built if "issue_floor_us" in c),
    }


def _global_loads_predicted(candidate: dict) -> bool:
    """Whether the analyzer expects LDG in the GEMM kernel: a synchronous copy, or a fused
    epilogue's input (its bias, loaded after the main loop, though ptxas may hoist it into it)."""
    return candidate["analyzer_synchronous_copies"] + candidate.get("analyzer_epilogue_inputs", 0) > 0


def format_report(report: dict) -> str:
    """The report as a person reads it."""
    lines = [f"{report['workload']} on {report['gpu']}, space {report['space']} -> {report['resolved_space']} "
             f"(shared memory a block <= {report['max_shared_memory_per_block']} B)",
             f"sketches: {report['sketches']}, pipeline depths {report['sketch_pipeline_depths']}",
             f"sampled {report['sampled']} of {report['sampling']['drawn']} draws; rejected "
             f"{report['sampling']['rejected']}; duplicates {report['sampling']['duplicates']}",
             f"variety: {report['variety']}"]
    if "analyzer_agreement" in report:
        lines.append(f"built {report['built']}, errors {report['errors']}; analyzer: {report['analyzer_agreement']}")
    if "emulated" in report:
        lines.append(f"emulated: {report['emulated']}")
    for index, c in enumerate(report["candidates"]):
        head = (f"[{index}] {c['instruction'] or 'other'} depth {c['pipeline_depth'] or '-'} unroll "
                f"{c['unroll_max_step']} | {c['geometry']}")
        synchronous = c["analyzer_synchronous_copies"]
        pred = (f"analyzer {c['analyzer_shared_bytes']} B shared, {c['analyzer_registers']:g} regs"
                f"{', spills' if c['analyzer_spills'] else ''}"
                f"{f', synchronous copies {synchronous}' if synchronous else ''}")
        if c.get("status") == "built":
            sass = " ".join(f"{k} {v}" for k, v in c["sass"].items()) + f" (HMMA shapes {c['hmma_shapes']})"
            local = f", local memory: {c['spill_bytes']} B spilled, {c['stack_bytes']} B stack" if c["spills"] else ""
            pred += (f" | built in {c['build_s']:.0f} s: {c['shared_bytes']} B shared, {c['registers']} regs{local}"
                     f" | SASS {sass}{_floor(c)}")
        elif c.get("status") == "error":
            pred += f" | ERROR {c['error']}"
        if "emulated" in c:
            pred += " | emulated: " + _emulated(c["emulated"])
        lines.extend([head, "    " + pred])
    return "\n".join(lines)


def _floor(candidate: dict) -> str:
    if "issue_floor_us" not in candidate:
        return ""
    return (f" | issue floor {candidate['issue_floor_us']:.1f} us (a lone warp's trip "
            f"{candidate['warp_trip_cycles']:g} cycles, {candidate['warp_trip_wait_cycles']:g} of them waiting)")


def _emulated(check: dict) -> str:
    status = check["status"].upper() if check["status"] != "right" else "right"
    error = f", error {check['error']:.1e}" if check["error"] is not None else ""
    why = f": {check['reason']}" if check["reason"] else ""
    return f"{status}{error} ({'; '.join(check['blocks'])} blocks, {check['seconds']:.0f} s){why}"


def cmd_space(args) -> int:
    report = space_report(SpaceQuery(workload=args.workload, gpu=args.gpu, space=args.space, sample=args.sample,
                                     build=args.build, seed=args.seed, jobs=args.jobs or default_max_workers(),
                                     emulate=args.emulate))
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report))
    not_right = sum(n for status, n in report.get("emulated", {}).items() if status in ("wrong", "fault"))
    return 1 if report["errors"] or not_right else 0


def add_space_command(sub) -> None:
    """``ms-pruner space WORKLOAD [--gpu NAME] [--space ...] [--sample N] [--build] [--emulate] [--json]``."""
    parser = sub.add_parser("space", help="inspect a design space: sketches, samples, and with --build their "
                                          "kernels compiled with nvcc (no GPU needed)")
    parser.add_argument("workload", help="workload spec, e.g. matmul:4096x4096x4096:float16:float32")
    parser.add_argument("--gpu", default="h100",
                        help="GPU spec name (h100, a100, ...), TVM tag or CUDA target as a JSON dict (as --target)")
    parser.add_argument("--space", default="auto", choices=SPACES)
    parser.add_argument("--sample", type=int, default=8, help="distinct valid candidates to draw")
    parser.add_argument("--build", action="store_true",
                        help="lower and compile each candidate with nvcc; read its SASS and shared memory")
    parser.add_argument("--emulate", action="store_true",
                        help="run each candidate's lowered kernels on the CPU and hold them against the exact result")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=None, help="candidates built at once (default: the builder's workers, the physical cores)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(func=cmd_space)
