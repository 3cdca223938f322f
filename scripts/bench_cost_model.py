"""The verify model against the analyzer alone and MetaSchedule's XGB on every committed run, and
PaCM's time budgets.

    python scripts/bench_cost_model.py --out-dir docs/results/cpu

Writes, under --out-dir:
- evaluate_model.json.gz / .md: each run's first half trains, its later half is ranked (seeds 0, 1, 2),
  for every run committed under docs/results (each GPU folder's work.tgz) and the shared H100
  database;
- by_round.json / .md: for the Pruner runs, at every round boundary, the rank of the fastest later
  record under each model trained on the rounds before;
- transfer.json.gz / .md: leave one workload out: PaCM pretrained (``ms-pruner train``) on the other
  workload's runs, then started from that file on each run of the held-out one (trees: the gate's
  warm start; transformer: MoA), beside the cold PaCM;
  MoA's rows also with its gate off (``pretrained-ungated``, ``MS_PRUNER_MOA_GATE=0``);
- cross_gpu.json.gz / .md: the same with the H100 runs (every workload) as the source and each H200
  run held out: a model pretrained on one GPU, adapted on another's records (MoA's setting; the H200
  has the H100's SM, so this is a shift in memory system, not in architecture);
- cost_model_bench.json: update with 2000 records, predict 2048 candidates, feature extraction;
  ``reading``: a run's records read through TVM's JSONDatabase and replayed, against
  ``replayed_in_file_order`` (one replay a record) and ``db list`` (none), and XGB scored on seeds
  0-2 extracting its own features each time, against evaluate-model's features read once.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import H100_MM4096, provenance, write_json  # noqa: E402

SEEDS = (0, 1, 2)


def evaluated_runs(work: str) -> list:
    from ms_pruner.shared_data import unpack_committed_runs

    runs = unpack_committed_runs(work)
    return runs + ([H100_MM4096] if os.path.isdir(H100_MM4096) else [])


def workload_kind(name: str) -> str:
    return "conv2d" if "conv2d" in name else "matmul"


def gpu_of(path: str) -> str:
    """The GPU folder a run sits under (docs/results/<gpu>/work.tgz, shared/data/<gpu>/)."""
    from ms_pruner.hardware import GPUS

    parts = os.path.normpath(path).split(os.sep)
    return next((part for part in parts if part in GPUS), "unknown")


def pretrained_rows(sources: list, targets: list, label: str, names: dict, work: str) -> tuple:
    """PaCM cold beside PaCM started from a file ``ms-pruner train`` wrote on ``sources`` (trees: the
    gate's warm start; transformer: MoA), on each of ``targets``: (rows, markdown tables)."""
    from ms_pruner.cost_model.offline import train_offline
    from ms_pruner.evaluation.model_ranking import evaluate_runs, markdown_table

    rows, tables = [], []
    for residual in ("trees", "transformer"):
        model_file = os.path.join(work, f"{label.replace(' ', '_')}_{residual}.pt")
        report = train_offline(sources, model_file, time_budget_s=120.0, residual=residual)
        found = evaluate_runs(targets, ["pacm", "pretrained"], SEEDS, pretrained=model_file)
        models = ["pacm", "pretrained"]
        if residual == "transformer":
            add_ungated_moa(found, targets, model_file)
            models.append("pretrained-ungated")
        for row in found:
            row["database"] = f"{names[row['database']]} ({residual} pretrained on {label})"
            row["pretrained_on"] = [names[r] for r in sources]
            row["pretraining"] = report
        rows.extend(found)
        tables.append(markdown_table(found, models))
    return rows, tables


def add_ungated_moa(rows: list, targets: list, model_file: str) -> None:
    """Each row's MoA again with its gate off (``MS_PRUNER_MOA_GATE=0``), as ``pretrained-ungated``."""
    from ms_pruner.cost_model.pacm import MOA_GATE_ENV
    from ms_pruner.evaluation.model_ranking import evaluate_runs

    setting = os.environ.get(MOA_GATE_ENV)
    os.environ[MOA_GATE_ENV] = "0"
    try:
        ungated = evaluate_runs(targets, ["pretrained"], SEEDS, pretrained=model_file)
    finally:
        if setting is None:
            del os.environ[MOA_GATE_ENV]
        else:
            os.environ[MOA_GATE_ENV] = setting
    for row, other in zip(rows, ungated):
        row["summary"]["pretrained-ungated"] = other["summary"]["pretrained"]
        for seed, scores in other["per_seed"].items():
            row["per_seed"][seed]["pretrained-ungated"] = scores["pretrained"]


def write_tables(out_dir: str, stem: str, common: dict, rows: list, tables: list) -> None:
    write_json(os.path.join(out_dir, f"{stem}.json.gz"), dict(common, seeds=list(SEEDS), runs=rows))
    with open(os.path.join(out_dir, f"{stem}.md"), "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(tables) + "\n")


def transfer(runs: list, names: dict, work: str, common: dict, out_dir: str) -> None:
    """Leave one workload out: pretrained on the other workload's runs."""
    rows, tables = [], []
    for held_out in ("conv2d", "matmul"):
        sources = [r for r in runs if workload_kind(names[r]) != held_out]
        targets = [r for r in runs if workload_kind(names[r]) == held_out]
        found, markdown = pretrained_rows(sources, targets, "the other workload", names, work)
        rows.extend(found)
        tables.extend(markdown)
    write_tables(out_dir, "transfer", common, rows, tables)


def cross_gpu(runs: list, names: dict, work: str, common: dict, out_dir: str) -> None:
    """Pretrained on every H100 run, evaluated on each H200 run."""
    sources = [r for r in runs if gpu_of(r) == "h100"]
    targets = [r for r in runs if gpu_of(r) == "h200"]
    rows, tables = pretrained_rows(sources, targets, "the H100 runs", names, work)
    write_tables(out_dir, "cross_gpu", common, rows, tables)


def budgets():
    """Timing on real samples replicated to the sizes the issue names (2000 records, 2048 candidates)."""
    from ms_pruner.database import replay_record
    from ms_pruner.cost_model import PaCMCore, Sample
    from ms_pruner.cost_model.pacm import _task_key
    from ms_pruner.database.records import mean_latency, records_in_file_order

    records = records_in_file_order(H100_MM4096)
    schedules = [replay_record(r) for r in records]
    out = {}
    for residual in ("trees", "transformer"):
        core = PaCMCore(seed=0, residual=residual)
        start = time.perf_counter()
        base = [core.featurize([sch], records[0].target)[0] for sch in schedules]
        featurize_us = (time.perf_counter() - start) / len(schedules) * 1e6
        rng = np.random.default_rng(0)
        task = _task_key(records[0].workload.mod)
        samples = [Sample(tokens=src.tokens, prior=src.prior, knobs=src.knobs, task=task,
                          latency_s=mean_latency(records[i % len(records)]) * float(rng.uniform(0.9, 1.1)))
                   for i, src in ((i, base[i % len(base)]) for i in range(2000))]
        core.add(samples)
        start = time.perf_counter()
        core.train()
        update_s = time.perf_counter() - start
        candidates = [base[i % len(base)] for i in range(2048)]
        core.scores(candidates[:64])
        start = time.perf_counter()
        core.scores(candidates)
        out[residual] = {"update_s_2000_records": update_s, "predict_s_2048_candidates": time.perf_counter() - start,
                         "featurize_us_per_candidate": featurize_us,
                         "featurize_s_2048_candidates": featurize_us * 2048 / 1e6, "device": str(core.device)}
    return out


def _timed(work):
    start = time.perf_counter()
    out = work()
    return out, time.perf_counter() - start


def _stock_xgb_scores(run, train, test, seed):
    """What evaluate-model's XGB did before it read features once: a fresh model extracting its own."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    from ms_pruner.database.records import measured_batch

    np.random.seed(seed)
    model = ms.cost_model.XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=100)
    context = ms.TuneContext(mod=run.records[0].workload.mod, target=run.records[0].target, num_threads=1)
    candidates, results = measured_batch(run.schedules, run.latency)
    model.update(context, [candidates[i] for i in train], [results[i] for i in train])
    return np.asarray(model.predict(context, [candidates[i] for i in test]), dtype=np.float64)


def reading(runs, names) -> dict:
    """Seconds to read each run: TVM's JSONDatabase (every trace replayed as it opens, the record
    list by latency) and each record replayed again for its schedule, against ours."""
    from ms_pruner.database import open_database, replay_record, replayed_in_file_order
    from ms_pruner.database.tools import list_database
    from ms_pruner.evaluation.model_ranking import EVALUATORS, load_run, train_count

    out = {}
    for path in runs:
        records, opened_s = _timed(lambda: list(open_database(path).get_all_tuning_records()))
        _, replayed_s = _timed(lambda: [replay_record(r) for r in records])
        ours, ours_s = _timed(lambda: replayed_in_file_order(path))
        listed, listed_s = _timed(lambda: list_database(path))
        run = load_run(path)
        n_train = train_count(len(run.records), 0.5)
        train, test = list(range(n_train)), list(range(n_train, len(run.records)))
        stock, stock_s = _timed(lambda: [_stock_xgb_scores(run, train, test, seed) for seed in SEEDS])
        once, once_s = _timed(lambda: [EVALUATORS["xgb"](run, train, test, seed)[0] for seed in SEEDS])
        out[names[path]] = {
            "records": len(records), "tvm_database_open_s": opened_s, "tvm_open_and_replay_s": opened_s + replayed_s,
            "replayed_in_file_order_s": ours_s, "db_list_s": listed_s,
            "same_records": len(ours) == len(records) and sum(row.records for row in listed) == len(records),
            "xgb_seeds_0_2_own_features_s": stock_s, "xgb_seeds_0_2_features_once_s": once_s,
            "xgb_same_scores": all(np.array_equal(a, b) for a, b in zip(stock, once))}
        print(names[path], out[names[path]])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default="docs/results/cpu")
    parser.add_argument("--models", default="analyzer,pacm,pacm-transformer,xgb")
    parser.add_argument("--skip", default="",
                        help="comma list of parts to skip: table, rounds, transfer, cross_gpu, budgets, reading")
    parser.add_argument("--read", default="mm4096_f16f32_stock_evolutionary,pruner-20261126-050343,"
                                          "stock-20261127-235610",
                        help="the runs the reading part times (comma list of run-name endings)")
    args = parser.parse_args()
    import torch

    from ms_pruner.evaluation.model_ranking import by_round, by_round_table, evaluate_runs, markdown_table, run_name
    from ms_pruner.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics()
    models = args.models.split(",")
    skip = set(args.skip.split(","))
    common = {**provenance(), "torch_threads": torch.get_num_threads()}
    timing = dict(common, **budgets()) if "budgets" not in skip else dict(common)  # first: its features cold
    with tempfile.TemporaryDirectory() as work:
        runs = evaluated_runs(work)
        names = {path: run_name(path) for path in runs}
        if "table" not in skip:
            rows = evaluate_runs(runs, models, SEEDS, progress=lambda path: print("scored", names[path]))
            for row in rows:
                row["database"] = names[row["database"]]
            write_json(os.path.join(args.out_dir, "evaluate_model.json.gz"),
                       dict(common, train_frac=0.5, seeds=list(SEEDS), models=models, runs=rows))
            with open(os.path.join(args.out_dir, "evaluate_model.md"), "w", encoding="utf-8") as handle:
                handle.write(markdown_table(rows, models) + "\n")
        if "rounds" not in skip:
            round_models = [m for m in models if m != "xgb"] + ["xgb", "xgb-trained"]
            ranks = {names[path]: by_round(path, round_models) for path in runs if "/pruner-" in path}
            write_json(os.path.join(args.out_dir, "by_round.json"), dict(common, seed=0, models=round_models,
                                                                          runs=ranks))
            with open(os.path.join(args.out_dir, "by_round.md"), "w", encoding="utf-8") as handle:
                handle.write(by_round_table(ranks, round_models) + "\n")
        if "transfer" not in skip:
            transfer(runs, names, work, common, args.out_dir)
        if "cross_gpu" not in skip:
            cross_gpu(runs, names, work, common, args.out_dir)
        if "reading" not in skip:
            timing["reading"] = reading([path for path in runs if path.endswith(tuple(args.read.split(",")))], names)
            print(timing)
    if "budgets" not in skip or "reading" not in skip:
        write_json(os.path.join(args.out_dir, "cost_model_bench.json"), timing)


if __name__ == "__main__":
    main()
