"""The static analyzer as a MetaSchedule cost model, so C++ evolution can use it as fitness."""

from __future__ import annotations

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ..analysis import StaticAnalyzer


@derived_object
class PSACostModel(PyCostModel):
    """Scores candidates with ``1 / estimated latency`` (0 for invalid). It does not learn."""

    def __init__(self, analyzer: StaticAnalyzer):
        super().__init__()
        self.analyzer = analyzer
        self.calls = 0
        self.seconds = 0.0

    def load(self, path: str) -> None:
        """Nothing to load: the analyzer has no learned state."""

    def save(self, path: str) -> None:
        """Nothing to save: the analyzer has no learned state."""

    def update(self, context, candidates, results) -> None:
        """The analyzer is a formula; measurements do not change it."""

    def predict(self, context, candidates) -> np.ndarray:
        import time

        start = time.perf_counter()
        scores = np.array([self.analyzer.estimate(c.sch.mod).score for c in candidates], dtype="float64")
        self.calls += len(scores)
        self.seconds += time.perf_counter() - start
        return scores
