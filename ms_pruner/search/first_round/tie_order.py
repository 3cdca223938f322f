"""How a geometry-capped (cold) batch orders the members the analyzer estimates as ties.

Within a kernel geometry the analyzer separates operand fetch widths and fragment arrangements by
about 1%, while the H100 measured them a few percent apart: the ties take the geometry's capped
picks in turn over both (geometry.spread_variants), and, where nvcc is at hand, those ptxas allots
clearly fewer registers go first (ptxas_ties.py).
"""

from __future__ import annotations

import time
from typing import Dict, List

from ...analysis import operand_fetch_bytes
from .arrangement import fragment_arrangement
from .geometry import spread_variants
from .ptxas_ties import can_compile, first_kernel_resources, order_ties_by_registers


class TieOrder:
    """``compose_batch``'s ``spread`` for one strategy: the turns, then ptxas's order of the
    favourite geometry's first ``ptxas_ties`` ties, each compiled once (``reports``, by structural
    hash); ``stats`` holds the last batch's compiles for the round log."""

    def __init__(self, facts, target, threads: int, band: float, ptxas_ties: int):
        self.facts = facts
        self.target = target
        self.threads = threads
        self.band = band
        self.ptxas_ties = ptxas_ties if band > 0 and can_compile(target) else 0
        self.reports: Dict[int, object] = {}
        self.stats: Dict[str, float] = {}

    def __call__(self, ranked: List) -> List:
        if self.band <= 0:
            return ranked
        facts = self.facts

        def tie_factors(sch):
            return operand_fetch_bytes(facts.estimate(sch).features), fragment_arrangement(sch.trace)

        def latency(sch):
            return facts.estimate(sch).latency_s

        spread = spread_variants(ranked, facts.geometry, tie_factors, latency, self.band)
        if self.ptxas_ties <= 0:
            return spread
        spread, self.stats["ptxas_promoted"] = order_ties_by_registers(
            spread, facts.geometry, latency, self.band, self.ptxas_ties, self._reports)
        return spread

    def round_stats(self, picks: List) -> Dict[str, float]:
        """The last batch's compiles for the round log, and how many of the batch's ``picks`` this
        strategy has compiled (``ptxas_picked``): the builder takes their cubins from the run's
        shared folder (builder/cubin_cache.py) instead of compiling them again."""
        if not self.reports:
            return dict(self.stats)
        compiled = sum(1 for s in picks if self.reports.get(self.facts.key(s)) is not None)
        return {**self.stats, "ptxas_picked": compiled}

    def _reports(self, schedules: List) -> List:
        start = time.perf_counter()
        missing = {self.facts.key(s): s for s in schedules if self.facts.key(s) not in self.reports}
        self.reports.update(zip(missing, first_kernel_resources([s.mod for s in missing.values()], self.target,
                                                                self.threads)))
        reports = [self.reports[self.facts.key(s)] for s in schedules]
        self.stats.update(ptxas_s=time.perf_counter() - start, ptxas_compiled=len(missing),
                          ptxas_reported=sum(1 for r in reports if r is not None))
        return reports
