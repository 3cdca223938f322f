"""Going on with a tuning run that an earlier call left in its work dir.

A call may have a fixed allowance (a GPU rented by the ten-minute call), and a 256-trial run can
need more; ``timeout -s INT`` then
stops it at a round boundary (interrupt.py) with every measured record in the database, and the
next call resumes. Two things would make the resumed run differ from one that was never cut:

- its round log would restart the clock, the round numbers and the trial count, so a comparison
  would read the second call as a run of its own. ``ResumePoint`` carries them over: wall time is
  the sum of the earlier calls' finished rounds and this call's time (the round that was cut, and
  the time between calls, count nowhere);
- its cost model would start untrained although the database holds every earlier measurement.
  ``warmed_cost_model`` trains it on them first (stock's XGB and our PaCM alike), inside the
  resumed call's first round, so the time it takes is counted as search.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Optional

import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..database.records import best_record, mean_latency, measured_batch, replay_record
from ..threads import map_on_threads


@dataclasses.dataclass
class ResumePoint:
    """Where a run stands when a call resumes it."""

    rounds: List[dict]  # the earlier calls' logged rounds, in order
    trials: int  # records of the workload already in the database
    wall_s: float  # wall time of the earlier calls' finished rounds
    best_latency_s: Optional[float]
    session: int  # this call's index among the calls that made the run


def workload_tag(mod) -> str:
    """A short name of a workload for the round log: one work dir may tune several."""
    return f"{int(tvm_ffi.structural_hash(mod)) & ((1 << 64) - 1):016x}"


ROUND_LOG = os.path.join("logs", "ms_pruner_rounds.jsonl")  # in a work dir; one JSON line a round


def round_log(log_path: str) -> List[dict]:
    """Every round of a work dir's round log, in order; a line cut short by a kill mid-write is
    skipped (the records, not the log, say what was measured)."""
    if not os.path.exists(log_path):
        return []
    rounds = []
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rounds.append(json.loads(line))
            except ValueError:
                continue
    return rounds


def logged_rounds(log_path: str, workload: str) -> List[dict]:
    """The rounds of ``workload`` (its workload_tag) in a work dir's round log (``round_log``)."""
    return [entry for entry in round_log(log_path) if entry.get("workload") == workload]


def resume_point(log_path: str, records, workload: str) -> Optional[ResumePoint]:
    """None when nothing of the workload was measured yet (a fresh run)."""
    if not records:
        return None
    rounds = logged_rounds(log_path, workload)
    best = best_record(records)
    return ResumePoint(
        rounds=rounds,
        trials=len(records),
        wall_s=float(rounds[-1]["wall_s"]) if rounds else 0.0,
        best_latency_s=mean_latency(best) if best is not None else None,
        session=max((int(r.get("session", 0)) for r in rounds), default=-1) + 1,
    )


def warmed_cost_model(model, workload, target, records, num_threads: Optional[int] = None):
    """(``model`` trained on ``records``, how many it learned); ``model`` is an instance or "xgb",
    created as ``ms.tune_tir`` would.

    The schedules are the records' traces replayed with their postprocessing, as MetaSchedule
    measured them, on ``num_threads`` threads (a resumed call's first round waits for them: warming
    on 192 records took 5.6-6.3 s in one thread on a 2-core AMD EPYC);
    failed runs go in as MetaSchedule stores them (1e10 s). Other names ("random") come back
    unchanged, having nothing to learn.
    """
    if num_threads is None:
        num_threads = ms.utils.cpu_count(logical=False)
    if model == "xgb":
        model = ms.CostModel.create("xgb", num_tuning_cores=num_threads, tree_method="auto")
    if isinstance(model, str):
        return model, 0

    def replayed(record):
        try:
            return replay_record(record)
        except Exception:  # pylint: disable=broad-except
            return None

    schedules, latency = [], []
    for record, sch in zip(records, map_on_threads(replayed, records, threads=num_threads)):
        if sch is not None:
            schedules.append(sch)
            latency.append(mean_latency(record))
    if schedules:
        context = ms.TuneContext(mod=workload, target=target, task_name="main", num_threads=num_threads)
        model.update(context, *measured_batch(schedules, latency))
    return model, len(schedules)
