"""The learned residual over the analyzer: gradient-boosted ranking trees, gated on later records.

score = PRIOR_SCALE * prior + trees(features), prior = -log(analyzer latency). The prior enters as
the boosting's base margin, scaled so that a 2% latency gap the analyzer sees is one unit of
margin: trees move candidates the analyzer ties or nearly ties, and overrule it elsewhere only
where many training pairs agree. Features are the analyzer's terms (the summary token) and the
candidate's decisions (``knobs.schedule_knobs``); both exist before a candidate is built.

Training asks the question tuning asks: do the records measured so far rank the next ones? Per
task, the later ``VALIDATION_SHARE`` of the records (measurement order) validates each of
``CANDIDATE_SETTINGS`` trained on the rest, against the analyzer alone; the winner on
Spearman + NDCG@10 + recall is then fit on every record. The analyzer alone wins ties, so the
learned part ranks only where it ranked better than the analyzer, by ``MIN_GAIN``, on records it had
not seen.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..analysis.metrics import ndcg_at_k, recall_at_top, spearman
from .training import later_share_split

PRIOR_SCALE = 50.0
LABEL_BIN = 0.01
VALIDATION_SHARE = 0.25
MIN_RECORDS = 16
MIN_GAIN = 0.02


@dataclasses.dataclass(frozen=True)
class TreeSettings:
    rounds: int
    max_depth: int = 3
    eta: float = 0.1
    prior_scale: float = PRIOR_SCALE


CANDIDATE_SETTINGS = (TreeSettings(rounds=60, max_depth=2), TreeSettings(rounds=200, max_depth=2),
                      TreeSettings(rounds=200, max_depth=3, prior_scale=100.0))
PRETRAIN_SETTINGS = TreeSettings(rounds=200, max_depth=3)
ADAPT_ROUNDS = 60


def rank_labels(latency: np.ndarray) -> np.ndarray:
    """1 + how many 1% steps (of log latency) a record is faster than the slowest; 0 when it failed.
    Bins, not raw ratios, so pairs within measurement noise tie instead of teaching noise."""
    ok = np.isfinite(latency)
    if not ok.any():
        return np.zeros(len(latency))
    worst = math.log(float(np.max(latency[ok])))
    logs = np.log(np.where(ok, latency, 1.0))
    return np.where(ok, np.floor((worst - logs) / LABEL_BIN) + 1.0, 0.0)


def group_order(tasks: Sequence[str]) -> np.ndarray:
    """Indices grouping equal tasks together, measurement order kept within each."""
    first: Dict[str, int] = {}
    for i, task in enumerate(tasks):
        first.setdefault(task, i)
    return np.array(sorted(range(len(tasks)), key=lambda i: (first[tasks[i]], i)), dtype=np.int64)


class TreeRanker:
    """One boosted ranking model on (features, prior) with fixed settings."""

    def __init__(self, settings: TreeSettings, seed: int = 0):
        self.settings = settings
        self.seed = seed
        self.booster = None

    def _matrix(self, features: np.ndarray, prior: np.ndarray, labels: Optional[np.ndarray] = None):
        import xgboost as xgb  # lazy: loaded by import_model_dependencies before the round clock

        matrix = xgb.DMatrix(features, label=labels)
        matrix.set_base_margin(prior * self.settings.prior_scale)
        return matrix

    def fit(self, features: np.ndarray, prior: np.ndarray, latency: np.ndarray, tasks: Sequence[str],
            base: Optional["TreeRanker"] = None):
        """Boost on the records, grouped by task; from ``base``'s trees when given (warm start)."""
        import xgboost as xgb  # lazy: loaded by import_model_dependencies before the round clock

        order = group_order(tasks)
        matrix = self._matrix(features[order], prior[order], rank_labels_per_task(latency, tasks)[order])
        matrix.set_group([list(tasks).count(task) for task in dict.fromkeys(tasks)])
        params = {"objective": "rank:pairwise", "eta": self.settings.eta, "max_depth": self.settings.max_depth,
                  "subsample": 0.8, "colsample_bytree": 0.8, "seed": self.seed, "nthread": 2, "verbosity": 0}
        self.booster = xgb.train(params, matrix, self.settings.rounds,
                                 xgb_model=base.booster if base is not None else None)
        return self

    def scores(self, features: np.ndarray, prior: np.ndarray) -> np.ndarray:
        if self.booster is None:
            return prior.astype(np.float64)
        return self.booster.predict(self._matrix(features, prior)).astype(np.float64) / self.settings.prior_scale


def rank_labels_per_task(latency: np.ndarray, tasks: Sequence[str]) -> np.ndarray:
    labels = np.zeros(len(latency))
    for task in set(tasks):
        members = np.array([i for i, t in enumerate(tasks) if t == task])
        labels[members] = rank_labels(latency[members])
    return labels


def validation_split(tasks: Sequence[str], share: float = VALIDATION_SHARE):
    """``training.later_share_split`` (none below MIN_RECORDS), each side in measurement order."""
    train, val = later_share_split(tasks, share, MIN_RECORDS)
    return np.array(sorted(train), dtype=np.int64), np.array(sorted(val), dtype=np.int64)


def ranking_quality(scores: np.ndarray, latency: np.ndarray, tasks: Sequence[str]) -> float:
    """Spearman + NDCG@10 + recall of the fastest tenth in the best 30%, averaged over tasks with 3+
    valid records (higher is better); the three figures evaluate-model reports."""
    values = []
    for task in set(tasks):
        members = np.array([i for i, t in enumerate(tasks) if t == task and math.isfinite(latency[i])])
        if len(members) < 3:
            continue
        s, m = scores[members], latency[members]
        values.append(spearman(-s, m) + ndcg_at_k(s, m, k=10, repeats=20) + recall_at_top(-s, m, repeats=20))
    return float(np.mean(values)) if values else 0.0


class GatedResidual:
    """The analyzer, or the analyzer plus the trees that ranked the later records best (module doc).

    With ``pretrained`` trees (``ms-pruner train --residual trees``, other workloads' records), two
    more candidates enter the gate: those trees as they are, and those trees boosted further on this
    run's records (``ADAPT_ROUNDS`` rounds): a warm start that the later records must still vouch for.
    """

    def __init__(self, seed: int = 0, settings: Sequence[TreeSettings] = CANDIDATE_SETTINGS):
        self.seed = seed
        self.settings = tuple(settings)
        self.model: Optional[TreeRanker] = None
        self.pretrained: Optional[TreeRanker] = None
        self.validation: Dict[str, float] = {}
        self.chosen_name = "analyzer"

    def _candidates(self) -> List[tuple]:
        """(name, fit) pairs; ``fit(features, prior, latency, tasks)`` returns a TreeRanker."""
        def cold(settings):
            return lambda *rows: TreeRanker(settings, self.seed).fit(*rows)

        out = [(repr(settings), cold(settings)) for settings in self.settings]
        base = self.pretrained
        if base is not None:
            adapt = dataclasses.replace(base.settings, rounds=ADAPT_ROUNDS)
            out.append(("pretrained", lambda *rows: base))
            out.append(("pretrained, adapted", lambda *rows: TreeRanker(adapt, self.seed).fit(*rows, base=base)))
        return out

    @property
    def chosen(self) -> Optional[TreeSettings]:
        return self.model.settings if self.model is not None else None

    def pretrain(self, features: np.ndarray, prior: np.ndarray, latency: np.ndarray, tasks: Sequence[str]) -> None:
        """Offline, on other workloads' records: ``PRETRAIN_SETTINGS`` trees on every record, no gate
        (the gate runs online, on the run that the trees are to rank)."""
        self.model = TreeRanker(PRETRAIN_SETTINGS, self.seed).fit(features, prior, latency, list(tasks))
        self.chosen_name = "pretrained"

    def fit(self, features: np.ndarray, prior: np.ndarray, latency: np.ndarray, tasks: Sequence[str]) -> None:
        tasks = list(tasks)
        self.model, self.validation = None, {}
        train, val = validation_split(tasks)
        if len(val) == 0 or np.isfinite(latency[train]).sum() < 2:
            return
        val_tasks = [tasks[i] for i in val]
        self.validation["analyzer"] = ranking_quality(prior[val], latency[val], val_tasks)
        best = self.validation["analyzer"] + MIN_GAIN
        winner, self.chosen_name = None, "analyzer"
        for name, fit in self._candidates():
            ranker = fit(features[train], prior[train], latency[train], [tasks[i] for i in train])
            quality = ranking_quality(ranker.scores(features[val], prior[val]), latency[val], val_tasks)
            self.validation[name] = quality
            if quality > best:
                best, winner, self.chosen_name = quality, fit, name
        if winner is not None:
            self.model = winner(features, prior, latency, tasks)

    def scores(self, features: np.ndarray, prior: np.ndarray) -> np.ndarray:
        return self.model.scores(features, prior) if self.model is not None else prior.astype(np.float64)

    def to_bytes(self) -> Optional[bytes]:
        return bytes(self.model.booster.save_raw("ubj")) if self.model is not None else None

    def load_bytes(self, raw: Optional[bytes], settings: Optional[TreeSettings], as_pretrained: bool = False) -> None:
        """Trees saved by ``to_bytes``: the model that ranks, or with ``as_pretrained`` the warm start
        that the gate weighs (the analyzer ranks until the first fit)."""
        import xgboost as xgb  # lazy: loaded by import_model_dependencies before the round clock

        ranker = None
        if raw is not None and settings is not None:
            ranker = TreeRanker(settings, self.seed)
            ranker.booster = xgb.Booster(model_file=bytearray(raw))
        if as_pretrained:
            self.pretrained, self.model = ranker, None
        else:
            self.model = ranker
