"""The static analyzer as a MetaSchedule cost model: the draft's fitness (search/draft.py), and the
verify model of the ``--cost-model analyzer`` ablation (Pruner without a learned model)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ..analysis import StaticAnalyzer
from ..analysis.memory import BoundedMemory
from ..database.records import structural_key

# Scores remembered (at least this many, at most twice: a few MB).
REMEMBERED_SCORES = 1 << 16


@derived_object
class PSACostModel(PyCostModel):
    """Scores candidates with ``(1 / estimated latency) ** power`` (0 for invalid).

    MetaSchedule's evolution draws parents in proportion to these scores and keeps the top ones, so
    ``power`` is the selection pressure: at 1 a schedule estimated twice as slow as the population's
    best is drawn half as often as it; at 4, a sixteenth. The kept order does not depend on it.
    It does not learn.

    Evolution scores its whole population every generation, and a parent copied without a mutation,
    a child that undoes its parent's mutation and a member carried over from the last round come back
    as the same program: each program's score is kept by structural hash (``scores``, a
    memory.BoundedMemory that two models of one analyzer may share), so the analyzer reads it once;
    a hash costs a fraction of an estimate. ``estimated`` counts this model's estimates, ``calls``
    every score asked of it.
    """

    def __init__(self, analyzer: StaticAnalyzer, power: float = 1.0, scores: Optional[BoundedMemory] = None):
        super().__init__()
        self.analyzer = analyzer
        self.power = power
        self.scores = scores if scores is not None else BoundedMemory(REMEMBERED_SCORES)
        self.calls = 0
        self.estimated = 0
        self.seconds = 0.0

    def load(self, path: str) -> None:
        """Nothing to load: the analyzer has no learned state."""

    def save(self, path: str) -> None:
        """Nothing to save: the analyzer has no learned state."""

    def update(self, context, candidates, results) -> None:
        """The analyzer is a formula; measurements do not change it."""

    def predict(self, context, candidates) -> np.ndarray:
        start = time.perf_counter()
        scores = np.array([self._score(c.sch.mod) for c in candidates], dtype="float64")
        if self.power != 1.0:
            scores = scores ** self.power  # not normalised per call: the kept heap compares across generations
        self.calls += len(scores)
        self.seconds += time.perf_counter() - start
        return scores

    def _score(self, mod) -> float:
        key = structural_key(mod)

        def estimate() -> float:
            self.estimated += 1
            return self.analyzer.estimate(mod, key).score

        return self.scores.get(key, estimate)
