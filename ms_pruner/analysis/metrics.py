"""Ranking metrics with honest tie handling.

MetaSchedule returns records sorted by latency, so any index-based tie-breaking would make a
constant predictor look perfect. Spearman uses average ranks (scipy.stats.spearmanr semantics);
recall and NDCG break ties at random and average over permutations.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Spearman rank correlation with average ranks; 0.0 when either side is constant."""
    from scipy.stats import rankdata  # lazy: scipy.stats takes 0.6 s to import, for this one ranking

    pred = np.asarray(predicted, dtype=float)
    meas = np.asarray(measured, dtype=float)
    if len(pred) < 2:
        return 0.0
    rank_p, rank_m = rankdata(pred), rankdata(meas)
    if np.all(rank_p == rank_p[0]) or np.all(rank_m == rank_m[0]):
        return 0.0
    return float(np.corrcoef(rank_p, rank_m)[0, 1])


def _random_order(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices sorting ``values`` ascending, ties in random order."""
    return np.lexsort((rng.random(len(values)), values))


def recall_at_top(predicted_latency: Sequence[float], measured_latency: Sequence[float], top: float = 0.1,
                  within: float = 0.3, repeats: int = 200, seed: int = 0) -> float:
    """Fraction of the measured-best ``top`` share that the predictor ranks in its best ``within``."""
    pred = np.asarray(predicted_latency, dtype=float)
    meas = np.asarray(measured_latency, dtype=float)
    n = len(meas)
    if n == 0:
        return 0.0
    k_top = max(1, int(round(top * n)))
    k_within = max(1, int(round(within * n)))
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(repeats):
        best = set(_random_order(meas, rng)[:k_top].tolist())
        kept = set(_random_order(pred, rng)[:k_within].tolist())
        total += len(best & kept) / k_top
    return total / repeats


def ndcg_at_k(predicted_score: Sequence[float], measured_latency: Sequence[float], k: int = 10,
              repeats: int = 200, seed: int = 0) -> float:
    """NDCG@k of the predictor's top-k (higher score = predicted faster); gain = best / latency."""
    score = np.asarray(predicted_score, dtype=float)
    meas = np.asarray(measured_latency, dtype=float)
    n = len(meas)
    if n == 0:
        return 0.0
    gains = np.min(meas) / meas
    k = min(k, n)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = float(np.sum(np.sort(gains)[::-1][:k] * discounts))
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(repeats):
        order = _random_order(-score, rng)[:k]
        total += float(np.sum(gains[order] * discounts))
    return total / repeats / ideal if ideal > 0 and not math.isnan(ideal) else 0.0
