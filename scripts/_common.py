"""Shared bits of the benchmark scripts: machine description and result writing."""

import gzip
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Optional

from ms_pruner.shared_data import H100_MM4096 as _H100_MM4096, shared_database

H100_MM4096 = shared_database(*_H100_MM4096)


def machine() -> dict:
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = None
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu": cpu, "physical_cores": psutil.cpu_count(logical=False), "gpu": gpu,
            "python": sys.version.split()[0]}


def _open_text(path: str, mode: str):
    """A text handle on ``path``, through gzip when it ends in ``.gz`` (results over 20 KB are
    committed gzipped, docs/results/README.md)."""
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with _open_text(path, "w") as handle:
        json.dump(payload, handle, indent=1)
        handle.write("\n")
    print(f"wrote {path}")


def read_json(path: str) -> dict:
    with _open_text(path, "r") as handle:
        return json.load(handle)


def provenance() -> dict:
    """What every result file says of where its figures come from: command, machine, commit and date."""
    return {"command": command_line(), "machine": machine(), "commit": git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def git_commit() -> str:
    """The commit the figures come from, ``+dirty`` when the tree has uncommitted changes."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def command_line() -> str:
    return "python " + " ".join(sys.argv)


def tune_context(mod, target, strategy, seed: int, threads: int, space: Optional[str] = None):
    """A TuneContext as ``ms.tune_tir`` builds one per task (task "main"): MetaSchedule's default
    rules (post-order-apply), or ms_pruner's resolved ``space`` (``resolved_space``: wmma, mma, all)."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.intrinsics import register_tensor_intrinsics
    from ms_pruner.space import space_generator

    register_tensor_intrinsics()
    generator = space_generator(space) if space else "post-order-apply"
    return ms.TuneContext(mod=mod, target=target, space_generator=generator, search_strategy=strategy,
                          task_name="main", rand_state=seed, num_threads=threads).clone()


def parse_params(items) -> dict:
    """``--set NAME=VALUE`` items as PrunerSearch settings (ms_pruner.search.parse_settings), and
    ``first_round=0``: the search without its first-round policy (``pruner_search``)."""
    from ms_pruner.search import parse_settings

    policy = [item for item in items if item.partition("=")[0].strip() == "first_round"]
    settings = parse_settings([item for item in items if item not in policy])
    return dict(settings, first_round=int(policy[-1].partition("=")[2])) if policy else settings


def pruner_search(seed: int, settings: dict):
    """A PrunerSearch with ``settings`` (``parse_params``)."""
    from ms_pruner.search import PrunerSearch, pruner_configs

    settings = dict(settings)
    policy = bool(settings.pop("first_round", 1))
    return PrunerSearch(*pruner_configs(settings, policy), seed=seed)


def add_workload_arguments(parser) -> None:
    """--workload/--gpu: search a workload that has no measured database (cold round only)."""
    parser.add_argument("--workload", default=None, help="a workload spec without a database: cold round only")
    parser.add_argument("--gpu", default="h100", help="the GPU whose target --workload is searched for")
    parser.add_argument("--space", default=None, choices=("wmma", "mma", "all", "auto"),
                        help="search ms_pruner's tensor-core space (docs/space.md) with its target's shared-memory "
                             "limit; default: MetaSchedule's own rules, in which WMMA takes every GEMM block")


def workload_and_target(args):
    """(normalised IRModule, target, space) of ``--workload`` on ``--gpu`` (``resolved_space``)."""
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.tuning.driver import normalized_mod
    from ms_pruner.workloads import parse_workload

    mod = normalized_mod(parse_workload(args.workload).prim_func())
    return (mod, *resolved_space(args, mod, get_gpu_spec(args.gpu).target()))


def resolved_space(args, mod, target):
    """(target, space) as ``--space`` is tuned: the target with the mma family's opt-in shared memory,
    the choice with ``auto`` decided once (deciding it generates the mma rule's sketches); (target,
    None) without ``--space``."""
    from ms_pruner.space import resolve_space, space_target

    if not args.space:
        return target, None
    space = resolve_space(args.space, mod, target)
    return space_target(space, target), space


def searched_source(args, target) -> dict:
    """What a result JSON says was searched: the --workload and its target, or the --db."""
    space = {"space": args.space or "MetaSchedule's rules"}
    if args.workload:
        return {"workload": args.workload, "target": str(target), **space}
    if isinstance(args.db, (list, tuple)):
        return {"db": [os.path.normpath(path) for path in args.db], **space}
    return {"db": os.path.normpath(args.db), **space}


# A global store: ``out_ptr[ADDR] = `` (scalar) or ``*(float4*)(out_ptr + ADDR) = `` (vectorized).
_GLOBAL_STORE = re.compile(r"^\s*(?:(?!buf_dyn_shmem_ptr)\w+_ptr\[(.*)\]"
                           r"|\*\(\w+\*\)\((?!buf_dyn_shmem_ptr)\w+_ptr \+ (.*)\)) = ")
_CSE_VAR = re.compile(r"^\s*(?:const )?(?:int|int64_t|long) (cse_v\w+) = (.*);")
_DIVISION = re.compile(r"[/%] (\d+)\)")


def pick_register_checks(picks, estimates, target, analyzer) -> list:
    """Each pick's (first) kernel against ptxas's report of it (``analysis.ptxas_checks``), or None."""
    from ms_pruner.evaluation import ptxas_checks

    checks = []
    for pick, estimate in zip(picks, estimates):
        paired = ptxas_checks(pick.sch.mod, target, estimate, analyzer)
        checks.append(paired[0] if paired else None)
    return checks


def emulated_picks(picks, instructions, workload, target) -> dict:
    """Each pick's kernels run by the emulator against the exact result (docs/emulator.md): what a
    round would measure checked before any GPU time, its statuses counted by tensor instruction, the
    picks not right listed with their reasons. ``workload``: a ``Workload`` or a ``PrimFuncWorkload``."""
    import collections

    from ms_pruner.emulator import EmulatedChecker

    checker = EmulatedChecker(workload, target)
    checks = [checker.check(pick.sch.mod) for pick in picks]
    by_instruction = collections.defaultdict(collections.Counter)
    for instruction, check in zip(instructions, checks):
        by_instruction[instruction][check.status] += 1
    return {"by_instruction": {k: dict(v) for k, v in sorted(by_instruction.items())},
            "largest_error": max((c.error for c in checks if c.error is not None), default=None),
            "seconds": round(sum(c.seconds for c in checks), 1),
            "not_right": [dict(c.as_json(), pick=i) for i, c in enumerate(checks) if c.status != "right"]}


def valid_records(path: str):
    """(index, record, measured seconds) of each record of the run in ``path`` that built and ran,
    in measurement order, with the tensor intrinsics registered that its traces name."""
    from ms_pruner.intrinsics import register_tensor_intrinsics
    from ms_pruner.database.records import FAILED_RUN_SECONDS, mean_latency, records_in_file_order

    register_tensor_intrinsics()
    for index, record in enumerate(records_in_file_order(path)):
        measured = mean_latency(record)
        if measured < FAILED_RUN_SECONDS:
            yield index, record, measured


def divides_in_output_address(mod, target) -> bool:
    """Whether the generated CUDA stores the result through an address that divides by a constant
    that is not a power of two (an im2col row split so that its divisions no longer fold), reading
    scalar and vectorized stores and the common subexpressions (``cse_v*``) their addresses use."""
    from ms_pruner.builder import cuda_sources

    return address_divides(cuda_sources(mod, target)[0])


def address_divides(source: str) -> bool:
    """``divides_in_output_address`` on CUDA source text."""
    shared = {}
    for line in source.splitlines():
        cse = _CSE_VAR.match(line)
        if cse:
            shared[cse.group(1)] = cse.group(2)
            continue
        store = _GLOBAL_STORE.match(line)
        if store and _divides(store.group(1) or store.group(2), shared):
            return True
    return False


def _divides(address: str, shared: dict, depth: int = 0) -> bool:
    if any(int(d) & (int(d) - 1) for d in _DIVISION.findall(address)):
        return True
    return depth < 8 and any(_divides(shared[name], shared, depth + 1)
                             for name in re.findall(r"\bcse_v\w+", address) if name in shared)
