"""``ms-pruner evaluate-model``: train on the first part of a measured run, score the rest.

Records are split in measurement (file) order, because that is what a cost model faces during
tuning: the later candidates are usually better than anything it was trained on.
"""

from __future__ import annotations

import math
import time
from typing import Dict, List, Sequence

import numpy as np

from ..analysis.metrics import ndcg_at_k, recall_at_top, spearman
from ..errors import UserError
from .pacm import PaCMCore, _task_key
from .training import Sample

MODELS = ("pacm", "xgb", "xgb-trained")


def _metrics(scores: np.ndarray, measured: np.ndarray) -> Dict[str, float]:
    valid = np.isfinite(measured)
    s, m = scores[valid], measured[valid]
    return {
        "spearman": spearman(-s, m),
        "ndcg10": ndcg_at_k(s, m, k=10),
        "recall_top10_in_top30": recall_at_top(-s, m),
    }


def load_measured(path: str):
    """Records of a database in measurement order, their replayed schedules, mean latencies (inf = failed)."""
    from ..analysis.db_eval import replay_record
    from ..tuning.records import FAILED_RUN_SECONDS, mean_latency, records_in_file_order

    records = records_in_file_order(path)
    if len(records) < 4:
        raise UserError(f"'{path}' holds {len(records)} records; evaluate-model needs at least 4")
    schedules = [replay_record(r) for r in records]
    latency = np.array([mean_latency(r) if mean_latency(r) < FAILED_RUN_SECONDS else math.inf for r in records])
    return records, schedules, latency


def _evaluate_pacm(records, schedules, latency, n_train: int, seed: int) -> tuple:
    core = PaCMCore(seed=seed)
    samples: List[Sample] = []
    start = time.perf_counter()
    for record, sch, lat in zip(records, schedules, latency):
        sample = core.featurize([sch.mod], record.target)[0]
        sample.latency_s, sample.task = float(lat), _task_key(record.workload.mod)
        samples.append(sample)
    featurize_us = (time.perf_counter() - start) / len(samples) * 1e6
    core.add(samples[:n_train])
    start = time.perf_counter()
    core.train()
    train_s = time.perf_counter() - start
    test = samples[n_train:]
    start = time.perf_counter()
    scores = core.scores(test)
    predict_us = (time.perf_counter() - start) / max(1, len(test)) * 1e6
    return scores, train_s, predict_us, {"featurize_us": featurize_us}


def _evaluate_xgb(records, schedules, latency, n_train: int, seed: int, warmup: int = 100) -> tuple:
    """MetaSchedule's XGBModel on its own features. Stock settings (``warmup=100``) answer random
    scores until 100 records are in; ``xgb-trained`` (warmup 0) shows what its features can do."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    from ..tuning.records import measured_batch

    np.random.seed(seed)  # the warm-up answers come from numpy's global generator
    model = ms.cost_model.XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=warmup)
    context = ms.TuneContext(mod=records[0].workload.mod, target=records[0].target, num_threads=1)
    candidates, results = measured_batch(schedules, latency)
    start = time.perf_counter()
    model.update(context, candidates[:n_train], results[:n_train])
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    scores = np.asarray(model.predict(context, candidates[n_train:]), dtype=np.float64)
    predict_us = (time.perf_counter() - start) / max(1, len(candidates) - n_train) * 1e6
    return scores, train_s, predict_us, {"predict_includes_features": True}


def evaluate_models(path: str, models: Sequence[str] = MODELS, train_frac: float = 0.5, seed: int = 0) -> dict:
    """Per model: spearman, ndcg10, recall_top10_in_top30, train_s, predict_us; plus per-record scores."""
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise UserError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if not 0.0 < train_frac < 1.0:
        raise UserError(f"--train-frac must be between 0 and 1, got {train_frac}")
    records, schedules, latency = load_measured(path)
    n_train = max(2, min(len(records) - 2, int(round(train_frac * len(records)))))
    evaluators = {
        "pacm": _evaluate_pacm,
        "xgb": _evaluate_xgb,
        "xgb-trained": lambda *args: _evaluate_xgb(*args, warmup=0),
    }
    out: Dict[str, object] = {}
    test_scores = {}
    for name in models:
        scores, train_s, predict_us, extra = evaluators[name](records, schedules, latency, n_train, seed)
        out[name] = dict(_metrics(scores, latency[n_train:]), train_s=train_s, predict_us=predict_us, **extra)
        test_scores[name] = scores
    out["test"] = [
        dict({"measured_s": float(lat) if math.isfinite(lat) else None},
             **{name: float(test_scores[name][i]) for name in models})
        for i, lat in enumerate(latency[n_train:])
    ]
    out["n_train"] = n_train
    return out
