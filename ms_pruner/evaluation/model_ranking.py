"""``ms-pruner evaluate-model``: train on the first part of a measured run, score the rest.

Records are split in measurement (file) order, because that is what a cost model faces during
tuning: the later candidates are usually better than anything it was trained on. Models:
``analyzer`` (the static analyzer's estimate alone, PaCM's prior), ``pacm`` (PaCM as tuning uses
it: the prior plus gated trees), ``pacm-transformer`` (the prior plus the pattern-token network), ``pretrained`` (PaCM started from
a ``ms-pruner train`` file as tuning starts it: trees as the gate's warm start, a transformer with
MoA's momentum 0.9), ``xgb`` (MetaSchedule's XGBModel, stock settings) and ``xgb-trained`` (the
same without warm-up).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature, PyFeatureExtractor

from ..analysis.metrics import ndcg_at_k, recall_at_top, spearman
from ..cost_model.pacm import PaCMCore, _task_key, pretrained_momentum, read_model_file
from ..cost_model.training import Sample
from ..database.lines import require_database_files
from ..database.records import FAILED_RUN_SECONDS, mean_latency, measured_batch, replayed_in_file_order
from ..errors import UserError
from ..tuning.resume import ROUND_LOG, round_log

MODELS = ("analyzer", "pacm", "pacm-transformer", "pretrained", "xgb", "xgb-trained")
METRICS = ("spearman", "ndcg10", "recall_top10_in_top30")


def _metrics(scores: np.ndarray, measured: np.ndarray) -> Dict[str, float]:
    valid = np.isfinite(measured)
    s, m = scores[valid], measured[valid]
    return {
        "spearman": spearman(-s, m),
        "ndcg10": ndcg_at_k(s, m, k=10),
        "recall_top10_in_top30": recall_at_top(-s, m),
    }


@dataclasses.dataclass
class MeasuredRun:
    """One database's records in measurement order, replayed and featurized once for every model."""

    path: str
    records: list
    schedules: list
    latency: np.ndarray
    samples: List[Sample]
    featurize_us: float
    xgb_inputs: Optional[tuple] = None

    def stock_inputs(self) -> tuple:
        """(candidates, runner results, features) as MetaSchedule's XGBModel takes them, made once."""
        if self.xgb_inputs is None:
            candidates, results = measured_batch(self.schedules, self.latency)
            self.xgb_inputs = (candidates, results, FeaturesOnce())
        return self.xgb_inputs


@derived_object
class FeaturesOnce(PyFeatureExtractor):
    """MetaSchedule's per-store features, extracted once a candidate: every XGBModel that scores a
    run (one a seed, one a round boundary) reads the same candidates, and extracting their features
    costs some 50 ms each, far more than training on them."""

    def __init__(self):
        super().__init__()
        self.stock = PerStoreFeature()
        self.features: Dict[int, object] = {}
        self.seconds = 0.0

    def extract_from(self, context, candidates):
        new = [c for c in candidates if c.__chandle__() not in self.features]
        if new:
            start = time.perf_counter()
            for candidate, feature in zip(new, self.stock.extract_from(context, new)):
                self.features[candidate.__chandle__()] = feature
            self.seconds += time.perf_counter() - start
        return [self.features[c.__chandle__()] for c in candidates]

    def us_per_candidate(self) -> float:
        return self.seconds / max(1, len(self.features)) * 1e6


def load_measured(path: str) -> tuple:
    """Records of a database in measurement order, their replayed schedules and mean latencies
    (inf = failed)."""
    replayed = replayed_in_file_order(path)
    if len(replayed) < 4:
        raise UserError(f"'{path}' holds {len(replayed)} records; evaluate-model needs at least 4")
    records, schedules = [r for r, _ in replayed], [s for _, s in replayed]
    latency = np.array([mean_latency(r) if mean_latency(r) < FAILED_RUN_SECONDS else math.inf for r in records])
    return records, schedules, latency


def load_run(path: str) -> MeasuredRun:
    """``load_measured`` and every record's PaCM sample, featurized once for all models."""
    records, schedules, latency = load_measured(path)
    core = PaCMCore()
    start = time.perf_counter()
    samples = []
    for record, sch, lat in zip(records, schedules, latency):
        sample = core.featurize([sch], record.target)[0]
        sample.latency_s, sample.task = float(lat), _task_key(record.workload.mod)
        samples.append(sample)
    featurize_us = (time.perf_counter() - start) / len(samples) * 1e6
    return MeasuredRun(path, records, schedules, latency, samples, featurize_us)


def _evaluate_analyzer(run: MeasuredRun, train: Sequence[int], test: Sequence[int], seed: int,
                       pretrained=None) -> tuple:
    start = time.perf_counter()
    scores = np.array([run.samples[i].prior for i in test], dtype=np.float64)
    return scores, 0.0, (time.perf_counter() - start) / max(1, len(test)) * 1e6, {"featurize_us": run.featurize_us}


def _pacm_evaluator(residual: str) -> Callable:
    """PaCM with the ``residual`` given, or (``"pretrained"``) started from the ``pretrained`` file."""
    def evaluate(run: MeasuredRun, train: Sequence[int], test: Sequence[int], seed: int,
                 pretrained: Optional[str] = None) -> tuple:
        if residual != "pretrained":
            core = PaCMCore(seed=seed, residual=residual)
        else:
            momentum = pretrained_momentum(pretrained)
            core = PaCMCore(seed=seed, momentum=momentum, residual="trees" if momentum is None else "transformer")
            core.load(pretrained, as_pretrained=True)
        core.add([run.samples[i] for i in train])
        start = time.perf_counter()
        core.train()
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = core.scores([run.samples[i] for i in test])
        predict_us = (time.perf_counter() - start) / max(1, len(test)) * 1e6
        extra = {"featurize_us": run.featurize_us}
        if core.residual == "trees":
            extra["trees"] = core.trees.chosen_name
        return scores, train_s, predict_us, extra
    return evaluate


def _xgb_evaluator(warmup: int) -> Callable:
    """MetaSchedule's XGBModel on its own features. Stock settings (``warmup=100``) answer random
    scores until 100 records are in; ``xgb-trained`` (warmup 0) shows what its features can do."""
    def evaluate(run: MeasuredRun, train: Sequence[int], test: Sequence[int], seed: int, pretrained=None) -> tuple:
        np.random.seed(seed)  # the warm-up answers come from numpy's global generator
        candidates, results, features = run.stock_inputs()
        model = ms.cost_model.XGBModel(extractor=features, config=XGBConfig(seed=seed), num_warmup_samples=warmup)
        context = ms.TuneContext(mod=run.records[0].workload.mod, target=run.records[0].target, num_threads=1)
        features.extract_from(context, [candidates[i] for i in list(train) + list(test)])
        start = time.perf_counter()
        model.update(context, [candidates[i] for i in train], [results[i] for i in train])
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = np.asarray(model.predict(context, [candidates[i] for i in test]), dtype=np.float64)
        predict_us = (time.perf_counter() - start) / max(1, len(test)) * 1e6
        return scores, train_s, predict_us, {"featurize_us": features.us_per_candidate()}
    return evaluate


EVALUATORS = {
    "analyzer": _evaluate_analyzer,
    "pacm": _pacm_evaluator("trees"),
    "pacm-transformer": _pacm_evaluator("transformer"),
    "pretrained": _pacm_evaluator("pretrained"),
    "xgb": _xgb_evaluator(100),
    "xgb-trained": _xgb_evaluator(0),
}


def check_models(models: Sequence[str], pretrained: Optional[str] = None) -> None:
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise UserError(f"unknown model(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODELS)}")
    if ("pretrained" in models) != (pretrained is not None):
        raise UserError("the model 'pretrained' and --pretrained FILE go together")
    if pretrained is not None:
        read_model_file(pretrained)


def score_split(run: MeasuredRun, models: Sequence[str], n_train: int, seed: int,
                pretrained: Optional[str] = None) -> dict:
    """Each model trained on the first ``n_train`` records, scored on the rest."""
    train, test = list(range(n_train)), list(range(n_train, len(run.records)))
    out: Dict[str, object] = {}
    test_scores = {}
    for name in models:
        scores, train_s, predict_us, extra = EVALUATORS[name](run, train, test, seed, pretrained)
        out[name] = dict(_metrics(scores, run.latency[n_train:]), train_s=train_s, predict_us=predict_us, **extra)
        test_scores[name] = scores
    out["test"] = [
        dict({"measured_s": float(lat) if math.isfinite(lat) else None},
             **{name: float(test_scores[name][i]) for name in models})
        for i, lat in enumerate(run.latency[n_train:])
    ]
    out["n_train"] = n_train
    return out


def train_count(total: int, train_frac: float) -> int:
    if not 0.0 < train_frac < 1.0:
        raise UserError(f"--train-frac must be between 0 and 1, got {train_frac}")
    return max(2, min(total - 2, int(round(train_frac * total))))


def evaluate_models(path: str, models: Sequence[str] = ("analyzer", "pacm", "xgb"), train_frac: float = 0.5,
                    seed: int = 0) -> dict:
    """Per model: spearman, ndcg10, recall_top10_in_top30, train_s, predict_us; plus per-record scores."""
    check_models(models)
    train_count(4, train_frac)
    run = load_run(path)
    return score_split(run, models, train_count(len(run.records), train_frac), seed)


def evaluate_runs(paths: Sequence[str], models: Sequence[str], seeds: Sequence[int], train_frac: float = 0.5,
                  progress: Callable[[str], None] = lambda _: None, pretrained: Optional[str] = None) -> List[dict]:
    """One row a run: per model and metric the mean and spread (min, max) over ``seeds``."""
    check_models(models, pretrained)
    train_count(4, train_frac)
    for path in paths:  # a missing run stops it before any scoring
        require_database_files(path)
    rows = []
    for path in paths:
        run = load_run(path)
        n_train = train_count(len(run.records), train_frac)
        per_seed = [score_split(run, models, n_train, seed, pretrained) for seed in seeds]
        summary = {m: {k: _spread([r[m][k] for r in per_seed]) for k in METRICS} for m in models}
        rows.append({"database": path, "records": len(run.records), "n_train": n_train,
                     "summary": summary, "per_seed": {str(s): {m: r[m] for m in models}
                                                      for s, r in zip(seeds, per_seed)}})
        progress(path)
    return rows


def _spread(values: Sequence[float]) -> Dict[str, float]:
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def run_name(path: str) -> str:
    """A database folder as the tables name it: its parent and its own name."""
    parts = os.path.normpath(path).split(os.sep)
    return "/".join(parts[-2:])


def markdown_table(rows: List[dict], models: Sequence[str]) -> str:
    """One line a run and model: each metric's mean over the seeds and its [min, max]."""
    seeds = len(rows[0]["per_seed"]) if rows else 0
    lines = ["| run | records (train) | model | Spearman | NDCG@10 | recall top10 in top30 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        for model in models:
            cells = []
            for metric in METRICS:
                value = row["summary"][model][metric]
                spread = f" [{value['min']:.2f}, {value['max']:.2f}]" if seeds > 1 else ""
                cells.append(f"{value['mean']:.3f}{spread}")
            lines.append(f"| {run_name(row['database'])} | {row['records']} ({row['n_train']}) | {model} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def round_boundaries(path: str) -> List[int]:
    """Record counts at the end of each tuning round but the last, from the run's round log
    (logs/ms_pruner_rounds.jsonl, one line a round with its ``trials``)."""
    log = os.path.join(path, ROUND_LOG)
    if not os.path.isfile(log):
        raise UserError(f"'{path}' has no round log ({ROUND_LOG}); --by-round needs one")
    trials = [int(entry["trials"]) for entry in round_log(log)]
    return [int(n) for n in np.cumsum(trials)[:-1]]


def rank_of_fastest(scores: np.ndarray, latency: np.ndarray) -> int:
    """1 + how many other records a model scores at least as high as the fastest one (ties count
    against the model)."""
    best = int(np.nanargmin(np.where(np.isfinite(latency), latency, np.nan)))
    return 1 + int(np.sum(np.delete(scores, best) >= scores[best]))


def by_round(path: str, models: Sequence[str], seed: int = 0) -> List[dict]:
    """At each round boundary r: every model trained on the records of rounds before r ranks all
    records of rounds r and later; the rank of the fastest of those, per model."""
    check_models(models)
    run = load_run(path)
    rows = []
    for boundary in round_boundaries(path):
        train, test = list(range(boundary)), list(range(boundary, len(run.records)))
        if not np.isfinite(run.latency[test]).any():
            continue
        row = {"trained_on": boundary, "ranked": len(test)}
        for name in models:
            scores = EVALUATORS[name](run, train, test, seed)[0]
            row[name] = rank_of_fastest(np.asarray(scores, dtype=np.float64), run.latency[test])
        rows.append(row)
    return rows


def by_round_table(runs: Dict[str, List[dict]], models: Sequence[str]) -> str:
    """``by_round``'s ranks, one line a run and boundary (lower is better; 1 = ranked first)."""
    lines = ["| run | trained on | ranked | " + " | ".join(models) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in models) + " |"]
    for name, rows in runs.items():
        for row in rows:
            lines.append(f"| {run_name(name)} | {row['trained_on']} | {row['ranked']} | "
                         + " | ".join(str(row[m]) for m in models) + " |")
    return "\n".join(lines)
