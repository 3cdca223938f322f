"""Reading MetaSchedule work dirs and JSON databases: records, best record, trace summaries."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Dict, List, Optional, Tuple

import tvm_ffi
from tvm.s_tir import Schedule, Trace, meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.target import Target

from ..errors import UserError, last_line
from ..files import make_folder
from ..intrinsics import register_tensor_intrinsics
from .lines import database_paths, describe_bad_lines, require_database_files

FAILED_RUN_SECONDS = 1e9


def structural_key(mod) -> int:
    """A program's structural hash: two candidates with the same key are the same program."""
    return int(tvm_ffi.structural_hash(mod))


def measure_candidate(sch):
    """The MeasureCandidate MetaSchedule hands cost models for a post-processed schedule."""
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def measured_batch(schedules, latency):
    """(candidates, runner results) for schedules with known latencies, as a cost model's ``update``
    receives them; a non-finite latency is a failed run, stored the way MetaSchedule stores it (1e10 s)."""
    candidates = [measure_candidate(s) for s in schedules]
    results = [RunnerResult(run_secs=[float(lat)] if math.isfinite(lat) else [1e10], error_msg=None)
               for lat in latency]
    return candidates, results


def open_database(path: str, create: bool = False):
    """Open the JSON database in ``path``; a missing or corrupt one is a one-line UserError.

    Tensor-core traces name intrinsics, so they are registered before the records are parsed.
    ``create`` makes the folder and empty files where they are missing.
    """
    if not create:
        require_database_files(path)
    else:
        make_folder(path, "database folder")
    workload_file, record_file = database_paths(path)
    register_tensor_intrinsics()

    try:
        return ms.database.JSONDatabase(
            path_workload=workload_file, path_tuning_record=record_file, allow_missing=create
        )
    except Exception as err:  # pylint: disable=broad-except
        raise _corrupt(path, err) from None


def _corrupt(path: str, err: Exception) -> UserError:
    """One line for a database that does not load: the file and line at fault when a line does
    not parse (with the command that sets such lines aside), else MetaSchedule's last line."""
    where = describe_bad_lines(path)
    if where is not None:
        return UserError(f"corrupt MetaSchedule database in '{path}': {where}; "
                         f"'ms-pruner db repair {path}' sets bad lines aside and keeps the rest")
    return UserError(f"corrupt MetaSchedule database in '{path}': {last_line(err, type(err).__name__)}")


def replayed_in_file_order(path: str) -> List[Tuple[object, Schedule]]:
    """Every record of the JSON database in ``path`` with the schedule it measured, in the order it
    was measured.

    ``Database.get_all_tuning_records`` returns records sorted by latency; model evaluation that
    trains on the first part of a run needs the file order instead. Each trace is replayed once:
    ``TuningRecord.from_json`` replays a trace to rebuild it and keeps the schedule to itself, and a
    ``JSONDatabase`` replays every record as it opens, so reading through them costs two or three
    replays a record (some 55 ms each for a 4096^3 WMMA trace).
    """
    require_database_files(path)
    register_tensor_intrinsics()
    return read_record_lines(path, _replayed_record)


def read_record_lines(path: str, read: Callable) -> list:
    """``read(payload, workload)`` for each line of the record file in ``path``, in file order (the
    payload as ``TuningRecord.from_json`` takes it: trace, run_secs, target, args_info); a database
    that does not read is one line. Tensor-core traces name intrinsics: a ``read`` that replays
    them registers those first."""
    require_database_files(path)
    workload_file, record_file = database_paths(path)
    try:
        with open(workload_file, encoding="utf-8") as handle:
            workloads = [ms.database.Workload.from_json(json.loads(line)) for line in handle if line.strip()]
        out = []
        with open(record_file, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    index, payload = json.loads(line)
                    out.append(read(payload, workloads[index]))
    except Exception as err:  # pylint: disable=broad-except
        raise _corrupt(path, err) from None
    return out


def _replayed_record(payload: list, workload) -> Tuple[object, Schedule]:
    """(record, schedule) from a record line's payload, as ``TuningRecord.from_json`` reads it."""
    trace, run_secs, target, args_info = payload
    sch = Schedule(workload.mod, debug_mask="none", error_render_level="none")
    Trace.apply_json_to_schedule(trace, sch)
    record = ms.database.TuningRecord(
        sch.trace, workload, run_secs=None if run_secs is None else [float(s) for s in run_secs],
        target=None if target is None else Target(target),
        args_info=None if args_info is None else [ArgInfo.from_json(info) for info in args_info])
    return record, sch


def records_in_file_order(path: str) -> List:
    """Every record of the JSON database in ``path``, in the order it was measured."""
    return [record for record, _ in replayed_in_file_order(path)]


class RecordLine:
    """A record as its line holds it: workload, target and ``run_secs`` read, the trace replayed only
    when it is asked for, so a reader that wants a run's best (``show``, ``check``, ``export``, ``db
    list``) replays one trace, not one a record. It reads as a ``TuningRecord`` does."""

    def __init__(self, path: str, payload: list, workload, target):
        self.path, self.payload, self.workload, self.target = path, payload, workload, target
        self.run_secs = payload[1]
        self._record = None

    @property
    def trace(self):
        return self.tuning_record().trace

    @property
    def args_info(self):
        return self.tuning_record().args_info

    def tuning_record(self):
        """The ``TuningRecord``. The tensor intrinsics (seconds to register) are registered when a
        trace does not replay without them, so a CPU run's reader never waits for them."""
        if self._record is None:
            try:
                self._record = _replayed_record(self.payload, self.workload)[0]
            except Exception:  # pylint: disable=broad-except
                register_tensor_intrinsics()
                try:
                    self._record = _replayed_record(self.payload, self.workload)[0]
                except Exception as err:  # pylint: disable=broad-except
                    raise _corrupt(self.path, err) from None
        return self._record


def record_lines_in_file_order(path: str) -> List[RecordLine]:
    """Every record of the JSON database in ``path`` as a ``RecordLine``, in the order it was measured."""
    targets: Dict[str, object] = {}

    def read(payload: list, workload) -> RecordLine:
        key = json.dumps(payload[2], sort_keys=True)
        if key not in targets:
            targets[key] = None if payload[2] is None else Target(payload[2])
        return RecordLine(path, payload, workload, targets[key])

    return read_record_lines(path, read)


def replay_record(record):
    """The post-processed schedule a record measured (its trace replayed with its decisions)."""
    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def replayed_top_records(database, mod, replay_many):
    """(records, schedules) of ``mod``'s valid records in ``database``, best first, each replayed by
    ``replay_many(traces, seeds)`` (a schedule is None where its trace no longer replays)."""
    records = list(database.get_top_k(database.commit_workload(mod), 1 << 30))
    return records, replay_many([r.trace for r in records], [1] * len(records))


def mean_latency(record) -> float:
    """Mean of ``run_secs`` in seconds; failed builds/runs come back as >= 1e9."""
    secs = [float(x) for x in record.run_secs] if record.run_secs is not None else []
    return sum(secs) / len(secs) if secs else float("inf")


def is_valid(record) -> bool:
    return mean_latency(record) < FAILED_RUN_SECONDS


def same_workload(record, mod) -> bool:
    return bool(tvm_ffi.structural_equal(record.workload.mod, mod))


def records_for(database, mod=None, target=None) -> List:
    """All records of ``database`` (for one workload and target when given), in file order."""
    records = list(database.get_all_tuning_records())
    if mod is not None:
        records = [r for r in records if same_workload(r, mod)]
    if target is not None:
        records = [r for r in records if same_target(r.target, target)]
    return records


def same_target(left, right) -> bool:
    """Targets compare by content: their JSON keys come back in different orders."""
    return json.loads(str(left)) == json.loads(str(right))


def best_record(records):
    valid = [r for r in records if is_valid(r)]
    return min(valid, key=mean_latency) if valid else None


def fastest_records(records, top: int) -> list:
    """The ``top`` fastest valid records, fastest first."""
    return sorted((r for r in records if is_valid(r)), key=mean_latency)[:top]


@dataclasses.dataclass
class TraceSummary:
    """The decisions that distinguish one tensor-core/CPU schedule from another."""

    tiles: List[List[int]]
    categorical: List[int]
    tensor_intrinsics: List[str]
    thread_bindings: List[str]

    def __str__(self) -> str:
        parts = ["tiles " + " ".join("x".join(str(t) for t in tile) for tile in self.tiles)]
        if self.categorical:
            parts.append("choices " + ",".join(str(c) for c in self.categorical))
        if self.thread_bindings:
            parts.append("binds " + ",".join(self.thread_bindings))
        if self.tensor_intrinsics:
            parts.append("intrinsics " + ",".join(self.tensor_intrinsics))
        return "; ".join(parts)


def summarize_trace(trace) -> TraceSummary:
    tiles, categorical, intrinsics, binds = [], [], [], []
    for inst in trace.insts:
        name = inst.kind.name
        decision = trace.get_decision(inst)
        if name == "SamplePerfectTile" and decision is not None:
            tiles.append([int(x) for x in decision])
        elif name == "SampleCategorical" and decision is not None:
            candidates = list(inst.attrs[0])
            categorical.append(int(candidates[int(decision)]))
        elif name == "Tensorize":
            intrin = str(inst.attrs[0])
            if intrin not in intrinsics:
                intrinsics.append(intrin)
        elif name == "Bind":
            tag = str(inst.attrs[0])
            if tag not in binds:
                binds.append(tag)
    return TraceSummary(tiles=tiles, categorical=categorical, tensor_intrinsics=intrinsics, thread_bindings=binds)


def workload_flops(mod) -> float:
    """FLOPs of a workload IRModule, as TVM estimates them from the unscheduled TIR."""
    return float(estimate_tir_flops(mod))


def group_by_workload(records) -> Dict[int, List]:
    """Records grouped by their workload object (one group per distinct workload in the file)."""
    groups: Dict[int, List] = {}
    keys: Dict[int, tuple] = {}  # records read from one file share workload objects: one hash each
    for record in records:
        workload = record.workload
        if id(workload) not in keys:  # the object is kept with its key, so its id is not reused
            keys[id(workload)] = (workload, structural_key(workload.mod))
        groups.setdefault(keys[id(workload)][1], []).append(record)
    return groups


def describe_best(records, flops: Optional[float] = None) -> str:
    best = best_record(records)
    if best is None:
        return f"{len(records)} records, none valid"
    latency = mean_latency(best)
    flops = workload_flops(best.workload.mod) if flops is None else flops
    return (
        f"{len(records)} records ({sum(1 for r in records if is_valid(r))} valid); best "
        f"{latency * 1e6:.1f} us = {flops / latency / 1e12:.3f} TFLOP/s on {best.target.kind.name}; "
        f"{summarize_trace(best.trace)}"
    )
