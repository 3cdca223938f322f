"""A warm start: the first round measures the best adapted records of other workloads first.

``PrunerSearch(warm_start=[work dirs])`` reads, when it meets a workload with nothing measured, the
fastest records of every other workload of the same operator kind and kind of target in those
databases (database/transfer.py), replays each on this workload's space with its tile splits
re-factored to the new extents, and ranks the valid ones by the analyzer. The cold round's batch
then takes the best of them first, up to ``share`` of it; the usual draft fills the rest. A record
seeds the tensor-core rule family it was tuned in (space.sketch_family), and only where the space
searched has that family: a WMMA record does not enter a ``--space mma`` run.
"""

from __future__ import annotations

import math
import random
from typing import List, Optional, Sequence

from ..database.transfer import adapting_provider, on_new_sketch, source_records
from ..space import sketch_family
from .space import PerSchedule


class WarmStart:
    """Adapted records for one tuning context's first round."""

    def __init__(self, paths: Sequence[str], per_workload: int = 8, share: float = 0.25):
        self.paths = list(paths)
        self.per_workload = per_workload
        self.share = share
        self.ranked: List[tuple] = []  # (schedule, source label), best estimated first
        self.stats = {}

    def prepare(self, space, facts, seed: int) -> None:
        """Adapt and replay the source records on ``space``, ranked by ``facts``' estimates."""
        found = source_records(self.paths, space.mod, space.target, self.per_workload)
        families = {sketch_family(sketch) for sketch in space.sketches}
        sources = [source for source in found if sketch_family(source.trace) in families]
        rng = random.Random(seed)
        provider = PerSchedule(adapting_provider)
        replayed = space.on_threads(lambda trace, s: space.replay(trace, s, decision_provider=provider),
                                    [on_new_sketch(source.trace, space.sketches) for source in sources],
                                    [rng.randrange(1, 1 << 30) for _ in sources])
        valid = [(sch, source.source) for sch, source in zip(replayed, sources) if sch is not None]
        self.ranked = sorted(valid, key=lambda entry: facts.estimate(entry[0]).latency_s)
        self.stats = {"warm_adapted": len(sources), "warm_valid": len(valid),
                      "warm_other_family": len(found) - len(sources)}

    def first_picks(self, picks: List, batch: int, key_of, measured: set, stats) -> List:
        """``picks`` led by the best adapted schedules not measured yet (at most ``share`` of
        ``batch``), the lowest-ranked of the others giving way; their sources go in the round log."""
        wanted = min(len(self.ranked), int(math.ceil(batch * self.share)))
        chosen, seen = [], set()
        for sch, source in self.ranked:
            key = key_of(sch)
            if len(chosen) < wanted and key not in measured and key not in seen:
                chosen.append((sch, source))
                seen.add(key)
        rest = [p for p in picks if key_of(p) not in seen][:max(0, batch - len(chosen))]
        stats.update(self.stats, warm_picked=len(chosen), warm_sources=[source for _, source in chosen])
        return [sch for sch, _ in chosen] + rest


def warm_best_source(timing: dict) -> Optional[str]:
    """The source record (``WORK_DIR#RANK of WORKLOAD``) that a logged round's fastest candidate
    was adapted from; None where the round's best came from the draft, or the round had no warm
    start. Warm picks lead the batch, so a best placed among the first ``warm_picked`` is one of them."""
    sources = (timing.get("strategy") or {}).get("warm_sources") or []
    place = timing.get("batch_best")
    return sources[place] if place is not None and place < len(sources) else None


def warm_start_line(timing: dict) -> str:
    """The warm start's part of a round's console line ('' for a round without one)."""
    split = timing.get("strategy") or {}
    if "warm_picked" not in split:
        return ""
    source = warm_best_source(timing)
    best = ("none ran" if timing.get("batch_best") is None
            else f"the round's best {'adapted from ' + source if source else 'from the draft'}")
    return (f"; warm start: {split['warm_adapted']} adapted, {split['warm_valid']} valid, {split['warm_picked']} "
            f"measured, {best}")
