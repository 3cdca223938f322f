"""What a resumed call spends before its first round's search: the cost model learning the earlier
records (tuning/resume.py) and the strategy reading them (PrunerSearch.pre_tuning), no GPU.

    python scripts/bench_resume.py --db <work dir> --records 192 --threads 1,2 --out ...

A call cut by a lending's time limit is resumed in a new process, whose first round first trains
its cost model on every record in the work dir (``warmed_cost_model``: each trace replayed with its
postprocessors, then the model's update; stock's XGB and Pruner's PaCM alike) and then lets the
strategy replay them again to know what was measured. Both count as that round's search. This times
both on the work dir's first ``--records`` records (the database as the cut call left it) for each
thread count, after the imports a tuning process makes before its clock starts.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, tune_context, write_json  # noqa: E402


def cut_database(db: str, records: int, into: str) -> str:
    """A copy of ``db`` holding its first ``records`` tuning records, in measurement order."""
    from ms_pruner.database.records import RECORD_FILE, WORKLOAD_FILE

    shutil.copy(os.path.join(db, WORKLOAD_FILE), into)
    with open(os.path.join(db, RECORD_FILE), encoding="utf-8") as source, \
            open(os.path.join(into, RECORD_FILE), "w", encoding="utf-8") as kept:
        for _, line in zip(range(records), source):
            kept.write(line)
    return into


def resume_seconds(db: str, threads: int, model_name: str) -> dict:
    from ms_pruner.search import PrunerSearch
    from ms_pruner.tuning.driver import import_model_dependencies, search_components
    from ms_pruner.database.records import open_database, records_for
    from ms_pruner.tuning.resume import warmed_cost_model

    database = open_database(db)
    first = database.get_all_tuning_records()[0]
    mod, target = first.workload.mod, first.target
    existing = records_for(database, mod, target)
    model = "xgb" if model_name == "xgb" else search_components("pruner", target, seed=0)[1]
    import_model_dependencies(model)
    start = time.perf_counter()
    model, learned = warmed_cost_model(model, mod, target, existing, num_threads=threads)
    entry = {"threads": threads, "model": model_name, "records": len(existing), "learned": learned,
             "warm_model_s": time.perf_counter() - start}
    if model_name == "pacm":
        context = tune_context(mod, target, PrunerSearch(seed=0), 0, threads)
        spaces = context.generate_design_space()
        start = time.perf_counter()
        context.pre_tuning(max_trials=len(existing) + 64, num_trials_per_iter=64, design_spaces=spaces,
                           database=database, cost_model=model)
        entry["pre_tuning_s"] = time.perf_counter() - start
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a tuning work dir (its database files)")
    parser.add_argument("--records", type=int, default=192, help="the first records of it to resume from")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--models", default="pacm,xgb")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from ms_pruner.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics()
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        db = cut_database(args.db, args.records, folder)
        for _ in range(args.repeat):
            for threads in (int(t) for t in args.threads.split(",")):
                for model in args.models.split(","):
                    runs.append(resume_seconds(db, threads, model))
                    print({k: round(v, 2) if isinstance(v, float) else v for k, v in runs[-1].items()}, flush=True)
    write_json(args.out, {"command": command_line(), "machine": machine(), "db": args.db, "runs": runs})


if __name__ == "__main__":
    main()
