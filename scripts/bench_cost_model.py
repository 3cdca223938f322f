"""PaCM vs MetaSchedule's XGB on held-out real records, and PaCM's time budgets.

    python scripts/bench_cost_model.py --out-dir docs/results/cpu

Writes evaluate_model.json (evaluate-model for seeds 0,1,2 and their mean) and
cost_model_bench.json (update with 2000 records, predict 2048 candidates, feature extraction).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import H100_MM4096 as DB, command_line, machine, write_json  # noqa: E402


def evaluate(models, seeds):
    from ms_pruner.cost_model import evaluate_models

    runs = {seed: evaluate_models(DB, models, train_frac=0.5, seed=seed) for seed in seeds}
    mean = {m: {k: float(np.mean([runs[s][m][k] for s in seeds])) for k in ("spearman", "ndcg10",
                                                                            "recall_top10_in_top30", "train_s",
                                                                            "predict_us")}
            for m in models}
    per_seed = {str(s): {m: runs[s][m] for m in models} for s in seeds}
    return {"database": os.path.relpath(DB), "train_frac": 0.5, "mean": mean, "per_seed": per_seed}


def budgets():
    """Timing on real tokens replicated to the sizes the issue names (2000 records, 2048 candidates)."""
    from ms_pruner.analysis import replay_record
    from ms_pruner.cost_model import PaCMCore, Sample
    from ms_pruner.cost_model.pacm import _task_key
    from ms_pruner.tuning.records import mean_latency, records_in_file_order

    records = records_in_file_order(DB)
    core = PaCMCore(seed=0)
    mods = [replay_record(r).mod for r in records]
    start = time.perf_counter()
    base = [core.featurize([m], records[0].target)[0] for m in mods]
    featurize_us = (time.perf_counter() - start) / len(mods) * 1e6
    rng = np.random.default_rng(0)
    task = _task_key(records[0].workload.mod)
    samples = []
    for i in range(2000):
        src = base[i % len(base)]
        latency = mean_latency(records[i % len(records)]) * float(rng.uniform(0.9, 1.1))
        samples.append(Sample(tokens=src.tokens, prior=src.prior, latency_s=latency, task=task))
    core.add(samples)
    start = time.perf_counter()
    report = core.train()
    update_s = time.perf_counter() - start
    candidates = [base[i % len(base)] for i in range(2048)]
    core.scores(candidates[:64])
    start = time.perf_counter()
    core.scores(candidates)
    predict_s = time.perf_counter() - start
    return {
        "update_s_2000_records": update_s,
        "update_epochs": report.epochs,
        "update_budget_s": core.time_budget_s,
        "predict_s_2048_candidates": predict_s,
        "featurize_us_per_candidate": featurize_us,
        "featurize_s_2048_candidates": featurize_us * 2048 / 1e6,
        "device": str(core.device),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default="docs/results/cpu")
    parser.add_argument("--models", default="pacm,xgb,xgb-trained")
    args = parser.parse_args()
    import torch

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()

    common = {"command": command_line(), "machine": machine(), "torch_threads": torch.get_num_threads()}
    result = dict(common, **evaluate(args.models.split(","), (0, 1, 2)))
    print({m: {k: round(v, 3) for k, v in row.items()} for m, row in result["mean"].items()})
    write_json(os.path.join(args.out_dir, "evaluate_model.json"), result)
    timing = dict(common, **budgets())
    print(timing)
    write_json(os.path.join(args.out_dir, "cost_model_bench.json"), timing)


if __name__ == "__main__":
    main()
