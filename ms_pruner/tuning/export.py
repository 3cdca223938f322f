"""``ms-pruner export``: a work dir's best kernel as a library a program loads with
``tvm.runtime.load_module``, built as the builder built it when it was measured.

MetaSchedule's own way out, ``ms.tir_integration.compile_tir`` and then ``tvm.compile``, rebuilds
the schedule under TVM's default pass options, where TVM 0.27 rejects a tuned fp16->fp32
tensor-core kernel at lowering (docs/builder.md), and without the builder's rewrites (swizzled
copies split by chunk, the mma epilogue fused, odd fp16 lanes unrolled): the kernel a program
would get is not the kernel that was measured, or none. ``export_best`` builds the record with
``build_candidate``, as ``check`` runs it, and exports the library with its device code compiled
(CUDA: the cubin nvcc made here for the record's arch, packed in; no GPU needed to export). The
library holds one function, the workload's, which takes its buffers in order.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import Optional

from ..builder import build_candidate, write_library
from ..database.records import fastest_records, mean_latency, replay_record, same_workload
from ..database.tools import records_by_workload_and_target, target_name
from ..database.transfer import workload_name
from ..errors import UserError, last_line, require_library_name
from ..space.families import tensor_instruction
from .check import add_work_dir_options, workload_in
from .driver import normalized_mod


@dataclasses.dataclass(frozen=True)
class ExportedKernel:
    """What ``export_best`` wrote."""

    path: str
    workload: str  # as ``db list`` names it
    function: str  # the library's function: ``tvm.runtime.load_module(path)[function](*buffers)``
    target: str
    latency_s: float  # the record's measured mean
    instruction: Optional[str]  # wmma, m16n8k8, m16n8k16; None off tensor cores
    source: Optional[str] = None  # where the device (CUDA) or host (LLVM IR) code was written


def export_best(work_dir: str, out: str, spec: Optional[str] = None, source: Optional[str] = None) -> ExportedKernel:
    """Export ``work_dir``'s fastest valid record of ``spec`` (``_records_of``; None: the work dir's
    one workload) to the library ``out`` (``.so``, or ``.tar`` to link elsewhere), and its generated
    code to ``source`` when given. A record that does not build here (a CUDA one without nvcc) is
    one line."""
    require_library_name("--out", out)
    records = _records_of(work_dir, spec)
    best = fastest_records(records, 1)
    if not best:
        raise UserError(f"'{work_dir}' holds no valid record of {workload_name(records[0].workload.mod)}")
    record = best[0]
    if record.target.kind.name == "cuda" and shutil.which("nvcc") is None:
        raise UserError("exporting a CUDA kernel compiles its device code here: it needs nvcc on PATH")
    schedule = replay_record(record)
    try:
        built = build_candidate(schedule.mod, record.target, None)
    except RuntimeError as err:  # TVM's FFI raises a failed build as RuntimeError
        raise UserError(f"cannot build the best record of {workload_name(record.workload.mod)} here: "
                        f"{last_line(err, type(err).__name__)[:200]}") from None
    write_library(built, out)
    if source is not None:
        try:
            with open(source, "w", encoding="utf-8") as handle:
                handle.write(_generated_code(built.executable, record.target))
        except OSError as err:
            raise UserError(f"cannot write {source}: {err.strerror or err}") from None
    return ExportedKernel(path=out, workload=workload_name(record.workload.mod),
                          function=next(iter(schedule.mod.functions)).name_hint, target=target_name(record.target),
                          latency_s=mean_latency(record), instruction=tensor_instruction(record.trace), source=source)


def _records_of(work_dir: str, spec: Optional[str]) -> list:
    """The records of one workload and target of ``work_dir``: ``spec``'s (a workload spec,
    ``FILE.py:NAME``, or the name ``db list`` gives it, as for a tune-model task), or the only one."""
    groups = records_by_workload_and_target(work_dir)
    if spec is not None:
        named = [g for g in groups if workload_name(g[0].workload.mod) == spec]
        if not named:
            mod = normalized_mod(workload_in(work_dir, spec).prim_func())
            named = [g for g in groups if same_workload(g[0], mod)]
        groups = named
    if len(groups) == 1:
        return groups[0]
    if not groups:
        raise UserError(f"'{work_dir}' holds no record" + (f" of {spec}" if spec else ""))
    held = "; ".join(f"{workload_name(g[0].workload.mod)} on {target_name(g[0].target)}" for g in groups)
    raise UserError(f"'{work_dir}' holds {len(groups)} workloads by target ({held}); "
                    + ("export takes a work dir with one (db best --out)" if spec else
                       "name one with --workload (a spec, FILE.py:NAME, or the name db list gives)"))


def _generated_code(executable, target) -> str:
    """The CUDA C of a CUDA kernel's device modules, else the host's LLVM IR."""
    if target.kind.name == "cuda":
        return "\n".join(m.inspect_source("") for m in executable.mod.imports if m.kind == "cuda")
    return executable.mod.inspect_source("ll")


def cmd_export(args) -> int:
    kernel = export_best(args.work_dir, args.out, args.workload, args.source)
    kind = f" ({kernel.instruction})" if kernel.instruction else ""
    print(f"wrote {kernel.path}: the best{kind} of {kernel.workload} on {kernel.target}, "
          f"{kernel.latency_s * 1e6:.1f} us measured; tvm.runtime.load_module('{kernel.path}')"
          f"['{kernel.function}'](*buffers)" + (f"; its code in {kernel.source}" if kernel.source else ""))
    return 0


def add_export_command(sub) -> None:
    parser = sub.add_parser("export", help="a work dir's best kernel as a library (tvm.runtime.load_module), built "
                                           "as it was measured")
    add_work_dir_options(parser, True, "its workload spec, FILE.py:NAME, or the name db list gives it (a tune-model "
                                       "task); without it: the work dir's one workload")
    parser.add_argument("--out", required=True, help="the library to write: FILE.so, or FILE.tar")
    parser.add_argument("--source", default=None,
                        help="also write the generated code here (CUDA C on a GPU target, LLVM IR on a CPU)")
    parser.set_defaults(func=cmd_export)
