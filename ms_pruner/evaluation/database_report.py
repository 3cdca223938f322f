"""Score the analyzer against a measured MetaSchedule database (``ms-pruner analyze``)."""

from __future__ import annotations

import dataclasses
import math
import shutil
import statistics
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..analysis.analyzer import Estimate, StaticAnalyzer
from ..analysis.geometry import geometry_name, kernel_geometry, operand_fetch_bytes
from ..analysis.metrics import recall_at_top, spearman
from ..analysis.registers import RegisterCheck, check_registers, summarize_register_checks
from ..analysis.issue_bound import issue_latencies, with_issue_floor
from ..builder.resources import cuda_source_resources
from ..builder.sass_issue import source_loop_issues
from ..builder.worker import cuda_sources
from ..database.records import FAILED_RUN_SECONDS, mean_latency, replayed_in_file_order
from ..errors import UserError
from ..hardware import GPUSpec, get_gpu_spec
from ..search.first_round.arrangement import arrangement_name, fragment_arrangement
from ..space.families import sketch_family, tensor_instruction
from .family_scores import family_scores


@dataclasses.dataclass
class RecordEstimate:
    predicted_s: Optional[float]
    measured_s: Optional[float]
    valid: bool
    reason: str
    geometry: Optional[str] = None  # features.geometry_name: which records are one kernel to the analyzer
    fetch_bytes: Optional[List[int]] = None  # per thread and instruction of each operand fetch (features.py)
    registers: Optional[List[RegisterCheck]] = None  # per kernel, against ptxas (evaluate_database(ptxas=True))
    arrangement: Optional[str] = None  # how a warp loops its fragments (search.arrangement), "" for none
    family: Optional[str] = None  # the tensor-core rule family, wmma or mma (space.sketch_family); None off them
    instruction: Optional[str] = None  # wmma, m16n8k8 or m16n8k16 (space.tensor_instruction); None off tensor cores
    shared_bytes: Optional[int] = None  # the analyzer's shared memory a block (its largest kernel's); None on a CPU


@dataclasses.dataclass
class DatabaseReport:
    spearman: float
    recall_top10_in_top30: float
    n_valid: int
    us_per_candidate: float
    records: List[RecordEstimate]
    registers: Optional[dict] = None  # summarize_register_checks over the records, with ptxas
    families: Optional[dict] = None  # family_scores: the ranking per rule family and across them
    shared_memory: Optional[dict] = None  # shared_memory_summary: the records beyond the launch default

    def as_json(self) -> dict:
        report = {
            "spearman": self.spearman,
            "recall_top10_in_top30": self.recall_top10_in_top30,
            "n_valid": self.n_valid,
            "us_per_candidate": self.us_per_candidate,
            "records": [_record_json(r) for r in self.records],
        }
        if self.registers is not None:
            report["registers"] = self.registers
        if self.families is not None:
            report["families"] = self.families
        if self.shared_memory is not None:
            report["shared_memory"] = self.shared_memory
        return report


def _record_json(record: RecordEstimate) -> dict:
    row = {"predicted_s": record.predicted_s, "measured_s": record.measured_s, "valid": record.valid,
           "geometry": record.geometry, "fetch_bytes": record.fetch_bytes, "arrangement": record.arrangement,
           "family": record.family, "instruction": record.instruction, "shared_bytes": record.shared_bytes}
    if record.registers is not None:
        row["registers"] = [check.as_json() for check in record.registers]
    return row


def record_from_json(row: dict) -> RecordEstimate:
    """A record of ``DatabaseReport.as_json`` read back (its ptxas checks left out)."""
    return RecordEstimate(predicted_s=row["predicted_s"], measured_s=row["measured_s"], valid=row["valid"], reason="",
                          geometry=row.get("geometry"), fetch_bytes=row.get("fetch_bytes"),
                          arrangement=row.get("arrangement"), family=row.get("family"),
                          instruction=row.get("instruction"), shared_bytes=row.get("shared_bytes"))


@dataclasses.dataclass
class GeometryGroup:
    """The records of one kernel geometry and one set of operand fetch widths (and, when grouped so,
    one fragment arrangement)."""

    geometry: str
    fetch_bytes: Optional[Tuple[int, ...]]
    per_round: List[int]  # records each round measured
    best_measured_s: Optional[float]
    best_predicted_s: Optional[float]
    arrangement: Optional[str] = None

    @property
    def records(self) -> int:
        return sum(self.per_round)


def group_by_geometry(records: Sequence[RecordEstimate], per_round: int,
                      by_arrangement: bool = False) -> List[GeometryGroup]:
    """Valid records grouped by (geometry, fetch widths), and ``by_arrangement`` by how a warp loops
    its fragments too, best measured first.

    ``records`` are in measurement order (as ``evaluate_database`` gives them), ``per_round`` records
    a round: a tuning run read this way shows which kernel shapes each round tried and how they
    measured, which a ranking score (Spearman) does not.
    """
    rounds = max(1, math.ceil(len(records) / per_round))
    groups: Dict[tuple, GeometryGroup] = {}
    for index, record in enumerate(records):
        if not record.valid or record.geometry is None:
            continue
        fetch = tuple(record.fetch_bytes) if record.fetch_bytes else None
        arrangement = record.arrangement if by_arrangement else None
        group = groups.setdefault((record.geometry, fetch, arrangement),
                                  GeometryGroup(record.geometry, fetch, [0] * rounds, None, None, arrangement))
        group.per_round[index // per_round] += 1
        group.best_measured_s = _smaller(group.best_measured_s, record.measured_s)
        group.best_predicted_s = _smaller(group.best_predicted_s, record.predicted_s)
    return sorted(groups.values(), key=lambda g: (g.best_measured_s is None, g.best_measured_s or 0.0))


def _smaller(current: Optional[float], value: Optional[float]) -> Optional[float]:
    if value is None:
        return current
    return value if current is None else min(current, value)


def score_estimates(estimates: List[Estimate], measured: List[Optional[float]]) -> DatabaseReport:
    """Spearman and recall over records that are both measured and valid for the analyzer."""
    records = []
    pairs = []
    for est, meas in zip(estimates, measured):
        predicted = est.latency_s if est.valid and math.isfinite(est.latency_s) else None
        records.append(RecordEstimate(predicted_s=predicted, measured_s=meas, valid=est.valid, reason=est.reason,
                                      geometry=geometry_name(kernel_geometry(est.features)),
                                      fetch_bytes=list(operand_fetch_bytes(est.features)) if est.features else None,
                                      shared_bytes=_shared_bytes(est)))
        if predicted is not None and meas is not None:
            pairs.append((predicted, meas))
    pred = [p for p, _ in pairs]
    meas = [m for _, m in pairs]
    return DatabaseReport(
        spearman=spearman(pred, meas),
        recall_top10_in_top30=recall_at_top(pred, meas),
        n_valid=len(pairs),
        us_per_candidate=0.0,
        records=records,
    )


def _shared_bytes(estimate: Estimate) -> Optional[int]:
    sizes = [int(f.smem_per_block) for f in estimate.features if hasattr(f, "smem_per_block")]
    return max(sizes) if sizes else None


def shared_memory_summary(records: Sequence[RecordEstimate], default_bytes: int) -> Optional[dict]:
    """The records whose kernels use more shared memory a block than a launch gets by default
    (``GPUSpec.smem_per_block_default_bytes``, 48 KB): TVM's CUDA runtime opts each such kernel in
    (``cuFuncSetAttribute``) before it launches, so the ones that ran show the opt-in working, and
    where the fastest lies says whether the best kernel needs it. None without GPU records."""
    sized = [r for r in records if r.shared_bytes is not None]
    if not sized:
        return None
    over = [r for r in sized if r.shared_bytes > default_bytes]
    ran = [r for r in over if r.measured_s is not None]
    within = [r for r in sized if r.shared_bytes <= default_bytes and r.measured_s is not None]
    fastest = min(ran + within, key=lambda r: r.measured_s, default=None)
    return {
        "default_bytes": default_bytes,
        "records": len(sized),
        "over_default": len(over),
        "over_default_measured": len(ran),
        "largest_measured_bytes": max((r.shared_bytes for r in ran), default=None),
        "best_over_default_us": min(r.measured_s for r in ran) * 1e6 if ran else None,
        "best_within_default_us": min(r.measured_s for r in within) * 1e6 if within else None,
        "fastest_shared_bytes": fastest.shared_bytes if fastest else None,
    }


def format_shared_memory(summary: dict) -> str:
    """``shared_memory_summary`` as the line ``ms-pruner analyze`` prints."""
    kb = 1024
    best = {key: f"{summary[key]:.1f} us" if summary[key] is not None else "-"
            for key in ("best_over_default_us", "best_within_default_us")}
    largest = summary["largest_measured_bytes"]
    return (f"shared memory a block over the default {summary['default_bytes'] // kb} KB (opted in at launch): "
            f"{summary['over_default']}/{summary['records']} records, {summary['over_default_measured']} ran"
            + (f" (up to {largest / kb:.1f} KB)" if largest else "")
            + f", best {best['best_over_default_us']}; within it best {best['best_within_default_us']}")


def evaluate_database(path: str, gpu: Optional[str] = None, cpu=None, ptxas: bool = False) -> DatabaseReport:
    """Replay every record of the database in ``path``, estimate it and score the ranking.

    ``gpu`` (a name) or ``cpu`` (a CPUSpec) says which machine to describe instead of the target's
    GPU or this host's CPU: records measured elsewhere are judged against that machine. ``ptxas``
    also compiles each CUDA record with nvcc (about a second each) and holds the analyzer's
    registers, spill call and residency against ptxas's report (``registers``)."""
    replayed = replayed_in_file_order(path)
    records = [record for record, _ in replayed]
    if ptxas:
        _check_ptxas_possible(records)
    analyzers = {}
    estimates: List[Estimate] = []
    measured: List[Optional[float]] = []
    registers: List[Optional[List[RegisterCheck]]] = []
    spent = 0.0
    for record, sch in replayed:
        target_key = str(record.target)
        if target_key not in analyzers:
            spec = get_gpu_spec(gpu) if gpu else None
            analyzers[target_key] = StaticAnalyzer.for_target(record.target, gpu=spec, cpu=cpu)
        mod = sch.mod
        start = time.perf_counter()
        estimates.append(analyzers[target_key].estimate(mod))
        spent += time.perf_counter() - start
        latency = mean_latency(record)
        measured.append(latency if latency < FAILED_RUN_SECONDS else None)
        if ptxas:
            try:
                registers.append(ptxas_checks(mod, record.target, estimates[-1], analyzers[target_key]))
            except RuntimeError:  # nvcc rejected the source: counted in records_without_report, not fatal
                registers.append(None)
    report = score_estimates(estimates, measured)
    report.us_per_candidate = spent / max(1, len(records)) * 1e6
    for row, record in zip(report.records, records):
        row.arrangement = arrangement_name(fragment_arrangement(record.trace))
        row.family, row.instruction = sketch_family(record.trace), tensor_instruction(record.trace)
    report.families = family_scores(report.records)
    gpus = [a.hardware for a in analyzers.values() if isinstance(a.hardware, GPUSpec)]
    if gpus:
        report.shared_memory = shared_memory_summary(report.records, gpus[0].smem_per_block_default_bytes)
    if ptxas:
        for row, checks in zip(report.records, registers):
            row.registers = checks
        report.registers = register_summary(report.records)
    return report


def _check_ptxas_possible(records) -> None:
    """Once, before any record is compiled: every record is for CUDA and nvcc is on PATH."""
    for record in records:
        if record.target.kind.name != "cuda":
            raise UserError(f"ptxas reports need CUDA records; this database's target is {record.target.kind.name}")
    if shutil.which("nvcc") is None:
        raise UserError("ptxas reports need nvcc on PATH")


def ptxas_checks(mod, target, estimate: Estimate, analyzer: StaticAnalyzer) -> List[RegisterCheck]:
    """A candidate's kernels (``mod``, estimated by ``analyzer``) against ptxas's report of them:
    compiled with nvcc as the builder lowers it (ValueError for a target that is not CUDA,
    RuntimeError when nvcc rejects the source), paired by ``check_registers`` with the analyzer's
    GPU and shared-memory limit, and each kernel's main loop issued from the same compile's SASS
    where a SASS reader is installed (``builder.sass_issue``)."""
    if target.kind.name != "cuda":
        raise ValueError(f"register report needs a CUDA target, not {target.kind.name}")
    sources, arch = cuda_sources(mod, target), str(target.arch)
    resources = [kernel for source in sources for kernel in cuda_source_resources(source, arch)]
    issues = source_loop_issues(sources, arch, *issue_latencies(analyzer.hardware))
    return check_registers(estimate, resources, analyzer.hardware, analyzer.max_shared_memory, issues)


def register_summary(records: Sequence[RecordEstimate]) -> dict:
    """summarize_register_checks over the records' first kernels, plus what the register count is
    worth to the ranking and how far estimates fall from measurements with and without a spill.

    ``spearman_with_ptxas_regs``: the records re-estimated with ptxas's register counts (every
    kernel; ``RegisterCheck.latency_with_ptxas_regs_s``) against the measurements, beside the
    analyzer's own; ``..._fastest_fifth``: the same over the fastest fifth measured."""
    checks = [r.registers[0] if r.registers else None for r in records]
    summary = summarize_register_checks(checks)
    summary["records_without_report"] = sum(c is None for c in checks)
    ratios: Dict[str, List[float]] = {"spilling": [], "not_spilling": []}
    spilling_by_acc: Dict[str, List[float]] = {}
    scored = []
    for record, check in zip(records, checks):
        if check is None or not record.predicted_s or not record.measured_s:
            continue
        ratio = record.measured_s / record.predicted_s
        ratios["spilling" if check.spill_ptxas else "not_spilling"].append(ratio)
        if check.spill_ptxas:
            spilling_by_acc.setdefault(f"{check.acc_fragments_per_warp:g}", []).append(ratio)
        rescored = record.predicted_s + sum(c.latency_with_ptxas_regs_s - c.latency_estimate_s
                                            for c in record.registers)
        scored.append((record.measured_s, record.predicted_s, rescored, _with_issue_floors(record)))
    summary["measured_over_estimate_median"] = {k: statistics.median(v) if v else None for k, v in ratios.items()}
    summary["measured_over_estimate_records"] = {k: len(v) for k, v in ratios.items()}
    summary["spilling_by_acc_fragments"] = {
        k: {"records": len(v), "measured_over_estimate_median": statistics.median(v)}
        for k, v in sorted(spilling_by_acc.items(), key=lambda kv: float(kv[0]))}
    scored.sort()
    names = ("spearman", "spearman_with_ptxas_regs", "spearman_with_issue_floor")
    for suffix, part in (("", scored), ("_fastest_fifth", scored[:max(2, len(scored) // 5)])):
        measured = [row[0] for row in part]
        for column, name in enumerate(names, start=1):
            summary[name + suffix] = spearman([row[column] for row in part], measured) if len(part) > 1 else None
    for column, name in ((1, "recall_top10_in_top30"), (3, "recall_top10_in_top30_with_issue_floor")):
        summary[name] = recall_at_top([row[column] for row in scored], [row[0] for row in scored]) if scored else None
    summary["lifted_by_issue_floor"] = sum(
        c.issue_floor_s > c.latency_estimate_s for r in records for c in (r.registers or []) if c.issue_floor_s)
    summary["records_with_sass"] = sum(
        bool(r.registers) and all(c.warp_trip_cycles is not None for c in r.registers) for r in records)
    return summary


def _with_issue_floors(record: RecordEstimate) -> float:
    """The record's estimate with each kernel's latency combined with its issue floor."""
    return record.predicted_s + sum(with_issue_floor(c.latency_estimate_s, c.issue_floor_s) - c.latency_estimate_s
                                    for c in record.registers)
