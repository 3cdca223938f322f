"""Score the analyzer against a measured MetaSchedule database (``ms-pruner analyze``)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Dict, List, Optional, Sequence, Tuple

from .analyzer import Estimate, StaticAnalyzer
from .features import geometry_name, kernel_geometry, operand_fetch_bytes
from .metrics import recall_at_top, spearman


@dataclasses.dataclass
class RecordEstimate:
    predicted_s: Optional[float]
    measured_s: Optional[float]
    valid: bool
    reason: str
    geometry: Optional[str] = None  # features.geometry_name: which records are one kernel to the analyzer
    fetch_bytes: Optional[List[int]] = None  # per thread and instruction of each operand fetch (features.py)


@dataclasses.dataclass
class DatabaseReport:
    spearman: float
    recall_top10_in_top30: float
    n_valid: int
    us_per_candidate: float
    records: List[RecordEstimate]

    def as_json(self) -> dict:
        return {
            "spearman": self.spearman,
            "recall_top10_in_top30": self.recall_top10_in_top30,
            "n_valid": self.n_valid,
            "us_per_candidate": self.us_per_candidate,
            "records": [
                {"predicted_s": r.predicted_s, "measured_s": r.measured_s, "valid": r.valid, "geometry": r.geometry,
                 "fetch_bytes": r.fetch_bytes}
                for r in self.records
            ],
        }


@dataclasses.dataclass
class GeometryGroup:
    """The records of one kernel geometry and one set of operand fetch widths."""

    geometry: str
    fetch_bytes: Optional[Tuple[int, ...]]
    per_round: List[int]  # records each round measured
    best_measured_s: Optional[float]
    best_predicted_s: Optional[float]

    @property
    def records(self) -> int:
        return sum(self.per_round)


def group_by_geometry(records: Sequence[RecordEstimate], per_round: int) -> List[GeometryGroup]:
    """Valid records grouped by (geometry, fetch widths), best measured first.

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
        group = groups.setdefault((record.geometry, fetch),
                                  GeometryGroup(record.geometry, fetch, [0] * rounds, None, None))
        group.per_round[index // per_round] += 1
        group.best_measured_s = _smaller(group.best_measured_s, record.measured_s)
        group.best_predicted_s = _smaller(group.best_predicted_s, record.predicted_s)
    return sorted(groups.values(), key=lambda g: (g.best_measured_s is None, g.best_measured_s or 0.0))


def _smaller(current: Optional[float], value: Optional[float]) -> Optional[float]:
    if value is None:
        return current
    return value if current is None else min(current, value)


def replay_record(record):
    """The post-processed schedule a record measured (its trace replayed with its decisions)."""
    from tvm.s_tir import Schedule

    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def score_estimates(estimates: List[Estimate], measured: List[Optional[float]]) -> DatabaseReport:
    """Spearman and recall over records that are both measured and valid for the analyzer."""
    records = []
    pairs = []
    for est, meas in zip(estimates, measured):
        predicted = est.latency_s if est.valid and math.isfinite(est.latency_s) else None
        records.append(RecordEstimate(predicted_s=predicted, measured_s=meas, valid=est.valid, reason=est.reason,
                                      geometry=geometry_name(kernel_geometry(est.features)),
                                      fetch_bytes=list(operand_fetch_bytes(est.features)) if est.features else None))
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


def evaluate_database(path: str, gpu: Optional[str] = None, cpu=None) -> DatabaseReport:
    """Replay every record of the database in ``path``, estimate it and score the ranking.

    ``gpu`` (a name) or ``cpu`` (a CPUSpec) says which machine to describe instead of the target's
    GPU or this host's CPU: records measured elsewhere are judged against that machine."""
    from ..hardware import get_gpu_spec
    from ..tuning.records import FAILED_RUN_SECONDS, mean_latency, records_in_file_order

    records = records_in_file_order(path)
    analyzers = {}
    estimates: List[Estimate] = []
    measured: List[Optional[float]] = []
    spent = 0.0
    for record in records:
        target_key = str(record.target)
        if target_key not in analyzers:
            spec = get_gpu_spec(gpu) if gpu else None
            analyzers[target_key] = StaticAnalyzer.for_target(record.target, gpu=spec, cpu=cpu)
        mod = replay_record(record).mod  # replaying is not the analyzer's cost
        start = time.perf_counter()
        estimates.append(analyzers[target_key].estimate(mod))
        spent += time.perf_counter() - start
        latency = mean_latency(record)
        measured.append(latency if latency < FAILED_RUN_SECONDS else None)
    report = score_estimates(estimates, measured)
    report.us_per_candidate = spent / max(1, len(records)) * 1e6
    return report
