"""``ms-pruner check``: does a run's best kernel (or its N fastest) compute what its workload asks?

A tuner's latency says nothing about the output, and TVM's mma rule computed wrong results before
TVM PR #18528; every reported kernel is therefore built here as the tuning builder builds it and run
once more, on the workload's random inputs, and held against the exact result (numpy, float64). It
runs on this machine's device in a worker process: a kernel that breaks the CUDA context, crashes
the worker or hangs is one failure, and the next one runs in a new worker. The error is the
largest absolute difference over the largest absolute reference value; where torch has the operator
(cuBLAS, cuDNN on a GPU) its error on the same inputs is reported beside, as the bar for the dtype.
With ``emulate`` the kernels run in the emulator instead (ms_pruner.emulator): a GPU run's records
checked on a machine without one, for the target each record names. With a ``Tracker`` (``--rpc``)
each kernel runs on one of the tracker's servers for the key, in a session of its own; torch's
error is then not reported (torch is not run there).

Without a workload spec (a ``tune-model`` work dir, a PrimFunc tuned from Python) every workload of
the database is checked, each against its own unscheduled function run on this machine's CPU
(``PrimFuncWorkload``): the same arithmetic in the same dtypes, with no torch beside it; integer
inputs (token ids, a gather's index) are drawn inside the axes they index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import List, Optional

import numpy as np

from ..builder import build_candidate, exported
from ..builder.runner import KernelWorker, output_of, target_device_type
from ..emulator import EmulatedChecker, PrimFuncWorkload
from ..database.records import fastest_records, mean_latency, open_database, records_for, replay_record
from ..database.tools import list_database, records_by_workload_and_target, target_name
from ..database.transfer import workload_name
from ..errors import UserError, last_line, require_positive
from ..hardware import add_target_options, resolve_target
from ..space.families import tensor_instruction
from ..user_files import file_name
from ..workloads import KernelFile, parse_workload, relative_error, tuned_workload
from .driver import normalized_mod
from .fleet import Tracker, add_rpc_option, tracker_of
from .reference import torch_operation


@dataclasses.dataclass
class OutputCheck:
    """One kernel of a run against the exact result."""

    work_dir: str
    workload: str
    best_latency_s: float  # the kernel's recorded latency (the run's best where ``rank`` is 1)
    error: float  # max |out - exact| / max |exact|
    tolerance: float
    torch_error: Optional[float]  # torch's own, on the same inputs (None where it has no such op)
    rank: int = 1  # 1 for the run's fastest record, 2 for the next, ...
    instruction: Optional[str] = None  # m16n8k8, m16n8k16 or wmma; None off tensor cores
    emulated: Optional[dict] = None  # the emulator's EmulatedCheck where it ran the kernel instead
    skipped: Optional[str] = None  # why a workload could not be checked (PrimFuncWorkload's refusal)
    failure: Optional[str] = None  # the error where the kernel failed to build here or to run

    @property
    def passed(self) -> bool:
        if self.skipped is not None or self.failure is not None:
            return False
        if self.emulated is not None:
            return self.emulated["status"] == "right"
        return bool(np.isfinite(self.error)) and self.error <= self.tolerance

    def as_json(self) -> dict:
        return dict(dataclasses.asdict(self), passed=self.passed)


@dataclasses.dataclass
class DeviceSession:
    """Where one ``check`` call's kernels run: each is built here as the tuning builder builds it,
    then run in a worker process on this machine (``KernelWorker``: a kernel that breaks the CUDA
    context, crashes or hangs is one failure, the next runs in a new worker) or, with a
    ``tracker``, on one of its servers in a session (a process) of its own."""

    tracker: Optional[Tracker] = None
    worker: KernelWorker = dataclasses.field(default_factory=KernelWorker)

    def output(self, record, workload, inputs, target) -> np.ndarray:
        """``record``'s kernel run on ``inputs`` on this machine's device or a server's: its output."""
        output = np.zeros(workload.output_shape(), dtype=workload.out_dtype)
        with exported(build_candidate(replay_record(record).mod, record.target, None)) as artifact:
            if self.tracker is None:
                return self.worker.output(artifact, target_device_type(target), inputs, output)
            return self.tracker.run_loaded(artifact, target_device_type(target),
                                           lambda kernel, device: output_of(kernel, device, inputs, output))

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> "DeviceSession":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def check_fastest(work_dir: str, spec: str, target, top: int = 1, emulate: bool = False,
                  session: Optional[DeviceSession] = None) -> List[OutputCheck]:
    """Build ``work_dir``'s ``top`` fastest records of ``spec`` as the builder does and check each
    one's output on this machine's device (a new intrinsic's kernels beside the best), or in the
    emulator for the record's own target."""
    require_positive("--top", top)
    workload = workload_in(work_dir, spec)
    mod = normalized_mod(workload.prim_func())
    records = fastest_records(records_for(open_database(work_dir), mod), top)
    if not records:
        raise UserError(f"'{work_dir}' holds no valid record of {spec}")
    if isinstance(workload, KernelFile):  # a user's kernel: its unscheduled function is the reference
        workload = PrimFuncWorkload(next(iter(mod.functions.values())), spec)
    with _given_or_new(session) as session:
        return _check_records(work_dir, spec, workload, records, target, emulate, session)


def check_database(work_dir: str, target, top: int = 1, emulate: bool = False,
                   session: Optional[DeviceSession] = None, name: Optional[str] = None) -> List[OutputCheck]:
    """Every workload of ``work_dir`` (per target), or those ``db list`` calls ``name`` (a
    tune-model task), its ``top`` fastest records each held against the workload's unscheduled
    function; a workload PrimFuncWorkload refuses is one skipped check."""
    require_positive("--top", top)
    groups = [g for g in records_by_workload_and_target(work_dir)
              if name is None or workload_name(g[0].workload.mod) == name]
    with _given_or_new(session) as session:
        checks = [check for group in groups for check in _check_group(work_dir, group, target, top, emulate, session)]
    if not checks:
        raise UserError(f"'{work_dir}' holds no record")
    return checks


def workload_in(work_dir: str, spec: str):
    """The workload ``spec`` names for ``work_dir``; a bad spec's line also points to the names
    ``db list`` gives, which ``--workload`` takes too."""
    try:
        return tuned_workload(spec)
    except UserError as err:
        raise UserError(f"{err}; or a name 'ms-pruner db list {work_dir}' prints") from err


def _listed_name(work_dir: str, name: str) -> bool:
    """Whether ``name`` is one that ``db list`` gives a workload of ``work_dir``; a spec or
    ``FILE.py:NAME`` is taken as one, not looked up among the names."""
    if file_name(name) is not None:
        return False
    try:
        parse_workload(name)
        return False
    except UserError:
        return any(row.workload == name for row in list_database(work_dir))


def _given_or_new(session: Optional[DeviceSession]):
    """``session`` as it is, or a new one whose worker stops at the end of the ``with``."""
    return contextlib.nullcontext(session) if session is not None else DeviceSession()


def _check_group(work_dir: str, group, target, top: int, emulate: bool, session) -> List[OutputCheck]:
    """One workload's records on one target (fastest first), checked against its unscheduled
    function; one skipped check where that cannot be done here."""
    records = fastest_records(group, top)
    label = f"{workload_name(group[0].workload.mod)} on {target_name(group[0].target)}"
    if not records:
        return [_skipped(work_dir, label, "no valid record")]
    measured_on = group[0].target.kind.name
    if emulate and measured_on != "cuda":
        return [_skipped(work_dir, label, f"measured on {measured_on}; the emulator runs CUDA kernels "
                                          "(check it here without --emulate)")]
    if not emulate and measured_on != target.kind.name:
        return [_skipped(work_dir, label, f"measured on {measured_on}, not this "
                                          f"{target.kind.name} device (--emulate checks CUDA records)")]
    try:
        workload = PrimFuncWorkload(next(iter(group[0].workload.mod.functions.values())), label)
    except UserError as err:
        return [_skipped(work_dir, label, str(err))]
    return _check_records(work_dir, label, workload, records, target, emulate, session)


def _skipped(work_dir: str, label: str, reason: str) -> OutputCheck:
    return OutputCheck(work_dir=work_dir, workload=label, best_latency_s=float("nan"), error=float("nan"),
                       tolerance=float("nan"), torch_error=None, skipped=reason)


def _check_records(work_dir, label, workload, records, target, emulate, session) -> List[OutputCheck]:
    """Each of ``records`` (fastest first) built and run here, or emulated, against the exact result
    (torch's error beside where torch has the workload's operator)."""
    inputs, exact, torch_error = None, None, None
    if not emulate:
        inputs = workload.random_inputs(seed=1)
        exact = workload.reference(inputs)
        torch_error = _torch_error(workload, inputs, exact, target) if session.tracker is None else None
    checks = []
    for rank, record in enumerate(records, start=1):
        check = OutputCheck(work_dir=work_dir, workload=label, best_latency_s=mean_latency(record), error=float("nan"),
                            tolerance=workload.tolerance, torch_error=torch_error, rank=rank,
                            instruction=tensor_instruction(record.trace))
        if emulate:
            emulated = EmulatedChecker(workload, record.target).check(replay_record(record).mod)
            check.emulated = emulated.as_json()
            check.error = emulated.error if emulated.error is not None else float("nan")
        else:
            _run_on_device(check, lambda: relative_error(session.output(record, workload, inputs, target), exact))
        checks.append(check)
    return checks


def _run_on_device(check: OutputCheck, error_of) -> None:
    """``check.error`` from ``error_of()``, or the device's one-line error as ``check.failure``."""
    try:
        check.error = error_of()
    except RuntimeError as err:  # TVM's FFI raises a failed build or launch as RuntimeError
        check.failure = last_line(err, type(err).__name__)[:200]


def compared_runs(out_dir: str) -> List[tuple]:
    """(work dir, workload spec) of every finished run of the comparison under ``out_dir``; the spec
    is None for a user's own kernel (``compare FILE.py:NAME``), which has no exact reference."""
    path = os.path.join(out_dir, "compare.json")
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read comparison {path}: {err}") from err
    return [(run["work_dir"], None if "file" in entry else spec) for spec, entry in report.get("workloads", {}).items()
            for run in entry.get("runs", {}).values()]


def _torch_error(workload, inputs, exact, target) -> Optional[float]:
    device = "cuda" if target.kind.name == "cuda" else "cpu"
    if isinstance(workload, PrimFuncWorkload):
        return None  # a model's task: no torch operator of its own
    if device == "cpu" and workload.in_dtype == "float16":
        return None  # torch's CPU fp16 GEMM is not what a GPU run is held against
    operation = torch_operation(workload, inputs, device)
    if operation is None:
        return None
    _, run, to_layout = operation
    return relative_error(to_layout(run()).float().cpu().numpy(), exact)


def cmd_check(args) -> int:
    if bool(args.compare) == bool(args.work_dir):
        raise UserError("check needs --work-dir DIR [--workload SPEC], or --compare OUT_DIR")
    if args.compare and args.workload:
        raise UserError("--workload goes with --work-dir; --compare reads each run's workload from compare.json")
    if args.emulate and args.rpc is not None:
        raise UserError("--emulate runs the kernels on this CPU; --rpc runs them on a tracker's servers: choose one")
    tracker = tracker_of(args)
    target = None if args.emulate else resolve_target(args.target, args.gpu, require_device=tracker is None).target
    if tracker is not None:
        tracker.check_device(target)
    with DeviceSession(tracker) as session:
        if args.work_dir and (not args.workload or _listed_name(args.work_dir, args.workload)):
            checks = check_database(args.work_dir, target, args.top, args.emulate, session, args.workload)
        else:
            runs = compared_runs(args.compare) if args.compare else [(args.work_dir, args.workload)]
            checks = [c for work_dir, spec in runs
                      for c in (check_fastest(work_dir, spec, target, args.top, args.emulate, session) if spec
                                else check_database(work_dir, target, args.top, args.emulate, session))]
    if args.json:
        print(json.dumps([c.as_json() for c in checks]))
    else:
        for check in checks:
            print(_report_line(check))
    checked = [c for c in checks if c.skipped is None]
    return 0 if checked and all(c.passed for c in checked) else 1


def _report_line(c: OutputCheck) -> str:
    if c.skipped is not None:
        return f"skip {c.workload} {c.work_dir}: {c.skipped}"
    torch_part = f", torch {c.torch_error:.2e}" if c.torch_error is not None else ""
    which = "best" if c.rank == 1 else f"#{c.rank}"
    kind = f" ({c.instruction})" if c.instruction else ""
    how = f", emulated: {c.emulated['status']} ({'; '.join(c.emulated['blocks'])} blocks)" if c.emulated else ""
    why = f": {c.emulated['reason']}" if c.emulated and c.emulated["reason"] else ""
    why += f": {c.failure}" if c.failure else ""
    return (f"{'ok  ' if c.passed else 'FAIL'} {c.workload} {c.work_dir}: {which}{kind} {c.best_latency_s * 1e6:.1f} us, "
            f"error {c.error:.2e} (tolerance {c.tolerance:.0e}{torch_part}){how}{why}")


def add_work_dir_options(parser, required: bool, workload_help: str) -> None:
    """``--work-dir`` (or ``--db``) and ``--workload``, as ``check`` and ``export`` take them."""
    parser.add_argument("--work-dir", "--db", required=required, default=None,
                        help="the work dir (MetaSchedule database)")
    parser.add_argument("--workload", default=None, help=workload_help)


def add_check_command(sub) -> None:
    parser = sub.add_parser("check", help="run a work dir's best kernel here and hold its output against the "
                                          "exact result (and torch's)")
    add_work_dir_options(parser, False, "the workload spec, FILE.py:NAME, or the name db list gives it (a tune-model "
                                        "task; without it: every workload of the work dir, each against its own "
                                        "unscheduled function)")
    parser.add_argument("--compare", default=None, metavar="OUT_DIR", help="every finished run of this comparison")
    parser.add_argument("--top", type=int, default=1, help="check each run's N fastest kernels, not its best alone")
    parser.add_argument("--emulate", action="store_true",
                        help="run the kernels in the CPU emulator, for each record's own target (no GPU needed)")
    add_target_options(parser)
    add_rpc_option(parser, "run the kernels on the servers a TVM RPC tracker holds for KEY (built here, each "
                           "in a session of its own; no torch error beside)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=cmd_check)
