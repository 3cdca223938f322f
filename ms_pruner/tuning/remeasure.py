"""Measuring a work dir's best records again, here: is this machine as fast as the one that tuned?

A comparison can span machines (restore.py): a run measured on one GPU is compared with a run
measured on another of the same kind. The best records of the earlier run, built and run again here
with the same builder and runner settings, say how far apart the two machines' timings are.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import List, Optional

from tvm.s_tir import meta_schedule as ms

from ..builder import close_builder, make_builder, make_runner
from ..database.records import fastest_records, mean_latency, measure_candidate, open_database, records_for, replay_record
from ..errors import UserError, last_line, require_positive


@dataclasses.dataclass
class Remeasured:
    """One record: the latency it was stored with and the one measured now (None when that failed)."""

    rank: int
    recorded_s: float
    measured_s: Optional[float]
    error: Optional[str] = None

    @property
    def ratio(self) -> Optional[float]:
        return self.measured_s / self.recorded_s if self.measured_s else None


def best_records(work_dir: str, target, top: int) -> List:
    """The ``top`` fastest valid records of ``work_dir`` tuned for ``target``."""
    require_positive("--top", top)
    records = fastest_records(records_for(open_database(work_dir), target=target), top)
    if not records:
        raise UserError(f"'{work_dir}' holds no valid record for target {target}")
    return records


def remeasure(records, target, builder="pruner", runner=None, repeats: int = 1) -> List[Remeasured]:
    """Build and run ``records`` again on this machine (our builder, the tuning runner's settings);
    with ``repeats``, the built kernels run that many times in turn and each keeps its median, for a
    machine whose timings drift between runs."""
    require_positive("--repeat", repeats)
    schedules = [replay_record(record) for record in records]
    owned = isinstance(builder, str)
    builder = make_builder(builder) if owned else builder
    runner = runner if runner is not None else make_runner()
    try:
        built = builder.build([ms.builder.BuilderInput(s.mod, target) for s in schedules])
    finally:
        if owned:
            close_builder(builder)
    device = "cuda" if target.kind.name == "cuda" else "cpu"  # ms_pruner tunes for CUDA and llvm
    inputs = [ms.runner.RunnerInput(str(b.artifact_path), device, measure_candidate(s).args_info)
              for b, s in zip(built, schedules) if not b.error_msg]
    runs = [[future.result() for future in runner.run(inputs)] if inputs else [] for _ in range(repeats)]
    ran = iter(zip(*runs))
    remeasured = []
    for rank, (record, result) in enumerate(zip(records, built)):
        if result.error_msg:
            remeasured.append(Remeasured(rank, mean_latency(record), None, last_line(result.error_msg)))
            continue
        results = next(ran)
        measured = [t for t in (_mean_seconds(r) for r in results) if t is not None]
        error = next((last_line(r.error_msg) for r in results if r.error_msg), "no time") if not measured else None
        remeasured.append(Remeasured(rank, mean_latency(record), statistics.median(measured) if measured else None,
                                     error))
    return remeasured


def _mean_seconds(result) -> Optional[float]:
    seconds = [float(s) for s in result.run_secs] if result.run_secs and not result.error_msg else []
    return sum(seconds) / len(seconds) if seconds else None


def summary(remeasured: List[Remeasured]) -> dict:
    """Median and range of measured/recorded over the records that ran."""
    ratios = [r.ratio for r in remeasured if r.ratio]
    return {"records": len(remeasured), "measured": len(ratios),
            "median_ratio": statistics.median(ratios) if ratios else None,
            "min_ratio": min(ratios, default=None), "max_ratio": max(ratios, default=None)}

