"""Per-round time accounting and progress: a timed builder/runner pair and a measure callback.

MetaSchedule's task scheduler runs, per round: generate candidates (search), build, run, then the
measure callbacks (database, cost-model update). Wrapping the builder and runner and appending a
callback (after MetaSchedule's own, so the cost-model update lies between the run and it) gives each
phase's wall time without touching the scheduler. With several tasks (a model) the scheduler first
searches, builds and runs one batch of every task, and only then closes their rounds, in the same
order: each batch's timings (and the search's own, PrunerSearch's) wait in a queue for their round.
One JSON line per round goes to ``<work_dir>/logs/ms_pruner_rounds.jsonl``; a resumed run continues
its round numbers, trial count and clock (``resume.ResumePoint``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time
from typing import List, Optional

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import PyBuilder
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import PyRunner

from .interrupt import check_stop, note_round, stop_unless_time_for
from ..database.records import FAILED_RUN_SECONDS


@dataclasses.dataclass
class RoundTiming:
    """Wall seconds of one measured batch, and what came out of it."""

    round: int
    task_id: int
    trials: int
    total_trials: int
    search_s: float
    build_s: float
    run_s: float
    update_s: float  # after the run: database commit and cost-model update (training)
    build_errors: int
    run_errors: int
    best_latency_s: Optional[float]
    wall_s: float  # since the run began, summed over the calls that made it (resume.py)
    strategy: dict = dataclasses.field(default_factory=dict)  # the search's own split (PrunerSearch)
    session: int = 0  # which call of a resumed run measured this round
    workload: Optional[str] = None  # resume.workload_tag of a tune_tir run (a work dir may hold several)
    batch_best: Optional[int] = None  # the fastest candidate's place in this batch (as the search ordered it)


def round_seconds(timing: dict) -> float:
    """Wall seconds of one logged round (a RoundTiming as a dict), from its search to its update."""
    return sum(float(timing.get(part, 0.0)) for part in ("search_s", "build_s", "run_s", "update_s"))


def follow_up_seconds(timing: dict) -> Optional[float]:
    """For a logged round that left part of its batch to a follow-up round (PrunerSearch's cold half,
    or a follow-up slice before the last): that round's seconds scaled to the next round's trials
    (``follow_up_due``; a follow-up searches less than a cold round); None otherwise."""
    due = int((timing.get("strategy") or {}).get("follow_up_due", 0))
    trials = int(timing.get("trials", 0))
    return round_seconds(timing) * due / trials if due > 0 and trials > 0 else None


def continues_batch(timing: dict) -> bool:
    """Whether a logged round measured the rest of the batch the round before it began (PrunerSearch's
    follow-up round after a cold round that measured part of its batch)."""
    return bool((timing.get("strategy") or {}).get("follow_up"))


def batch_seconds(timings: List[dict]) -> List[float]:
    """Wall seconds of each measured batch of a round log, a follow-up round added to the round
    before it: what a time limit budgets the next round at (interrupt.note_round)."""
    batches: List[float] = []
    for timing in timings:
        if continues_batch(timing) and batches:
            batches[-1] += round_seconds(timing)
        else:
            batches.append(round_seconds(timing))
    return batches


class RoundClock:
    """Timestamps shared by TimedBuilder, TimedRunner and ProgressCallback."""

    def __init__(self, log_path: Optional[str] = None, progress=None, total_trials: int = 0,
                 strategy_timings: Optional[list] = None, resume=None, workload: Optional[str] = None,
                 call: Optional[int] = None):
        self.start = time.perf_counter()
        self.last_mark = self.start  # the end of the last run or round: the next batch's search starts there
        self.batches = collections.deque()  # {search_s, build_s, run_s} of each batch whose round is open
        self.rounds: List[RoundTiming] = []
        self.total_trials = total_trials
        self.trials_done = 0
        self.best_latency_s: Optional[float] = None
        self.log_path = log_path
        self.progress = progress
        self.strategy_timings = strategy_timings if strategy_timings is not None else []
        self._timings_seen = 0
        self.workload = workload
        self.first_round, self.wall_offset, self.session = 0, 0.0, 0
        if resume is not None:
            self.first_round, self.wall_offset, self.session = len(resume.rounds), resume.wall_s, resume.session
            self.trials_done, self.best_latency_s = resume.trials, resume.best_latency_s
        if call is not None:
            self.session = call

    def _new_strategy_timing(self) -> dict:
        """The search's own entry for the oldest open round (one a batch it searched, in order)."""
        if len(self.strategy_timings) <= self._timings_seen:
            return {}
        self._timings_seen += 1
        return dict(self.strategy_timings[self._timings_seen - 1])

    def note_build(self, start: float, end: float) -> None:
        self.batches.append({"search_s": max(0.0, start - self.last_mark), "build_s": end - start, "run_s": 0.0})

    def note_run(self, start: float, end: float) -> None:
        if self.batches:
            self.batches[-1]["run_s"] = end - start
        self.last_mark = end

    def trials_left(self) -> bool:
        return sum(r.trials for r in self.rounds) < self.total_trials

    def finish_round(self, task_id: int, builder_results, runner_results) -> RoundTiming:
        now = time.perf_counter()
        build_errors = sum(1 for r in builder_results if r.error_msg is not None)
        run_errors, batch_best, batch_best_s = 0, None, FAILED_RUN_SECONDS
        for place, (built, ran) in enumerate(zip(builder_results, runner_results)):
            if built.error_msg is not None:
                continue
            if ran.error_msg is not None or not ran.run_secs:
                run_errors += 1
                continue
            latency = sum(float(x) for x in ran.run_secs) / len(ran.run_secs)
            if latency < batch_best_s:
                batch_best, batch_best_s = place, latency
        if batch_best is not None and (self.best_latency_s is None or batch_best_s < self.best_latency_s):
            self.best_latency_s = batch_best_s
        self.trials_done += len(runner_results)
        batch = self.batches.popleft() if self.batches else {"search_s": 0.0, "build_s": 0.0, "run_s": 0.0}
        timing = RoundTiming(
            round=self.first_round + len(self.rounds),
            task_id=task_id,
            trials=len(runner_results),
            total_trials=self.trials_done,
            **batch,
            update_s=max(0.0, now - self.last_mark),
            build_errors=build_errors,
            run_errors=run_errors,
            best_latency_s=self.best_latency_s,
            wall_s=self.wall_offset + now - self.start,
            strategy=self._new_strategy_timing(),
            session=self.session,
            workload=self.workload,
            batch_best=batch_best,
        )
        self.rounds.append(timing)
        self.last_mark = now
        if self.log_path:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(dataclasses.asdict(timing)) + "\n")
        if self.progress is not None:
            self.progress.update(len(runner_results))
            if self.best_latency_s is not None:
                self.progress.set_postfix(best_us=f"{self.best_latency_s * 1e6:.1f}", refresh=False)
        return timing


@derived_object
class TimedBuilder(PyBuilder):
    """Forwards to a builder and records how long each batch took."""

    def __init__(self, inner, clock: RoundClock):
        super().__init__()
        self.inner = inner
        self.clock = clock

    def build(self, build_inputs):
        check_stop()
        start = time.perf_counter()
        results = self.inner.build(build_inputs)
        self.clock.note_build(start, time.perf_counter())
        return results


@derived_object
class TimedRunner(PyRunner):
    """Forwards to a runner, waits for the batch, and records how long it took."""

    def __init__(self, inner, clock: RoundClock):
        super().__init__()
        self.inner = inner
        self.clock = clock

    def run(self, runner_inputs):
        check_stop()
        start = time.perf_counter()
        futures = self.inner.run(runner_inputs)
        for future in futures:
            future.result()
        self.clock.note_run(start, time.perf_counter())
        return futures


@derived_object
class ProgressCallback(PyMeasureCallback):
    """Closes the round on the clock: progress bar, best latency so far, and the JSON log line."""

    def __init__(self, clock: RoundClock):
        super().__init__()
        self.clock = clock

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        timing = dataclasses.asdict(self.clock.finish_round(task_id, builder_results, runner_results))
        note_round(round_seconds(timing), continues_batch(timing))
        if self.clock.trials_left():
            stop_unless_time_for(follow_up_s=follow_up_seconds(timing))
        check_stop()
