"""Earlier ``bench_cold_round.py`` outputs read again at other targets, with no search.

    python scripts/rescore_cold_rounds.py --db RUN1 --db RUN2 --target-us 430.2 --target-us 442.1 \\
        before=cold_before.json.gz after=cold_after.json.gz

Which picks a cold round makes does not depend on the latency it is read against, so rounds drawn
once can be held against several (stock's best of one run, of another): for each labelled file
and target, every seed's expected picks at or below the target and the chance of one, by shape
(``shape_hit_odds``) and by warp arrangement (``arrangement_hit_odds``), and their mean and range.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, read_json, write_json  # noqa: E402
from bench_cold_round import arrangement_hit_odds, database_reference, shape_hit_odds  # noqa: E402

ODDS = ("expected_picks_at_target", "chance_of_a_pick_at_target",
        "expected_picks_at_target_by_arrangement", "chance_of_a_pick_at_target_by_arrangement")


def rescore(runs: list, reference: dict, prior: float) -> list:
    """Each run's seed and odds against ``reference`` (``database_reference`` at one target)."""
    rows = []
    for run in runs:
        row = {"seed": run["seed"]}
        row.update(shape_hit_odds(run["picks_by_shape"], reference["hits_by_shape"]))
        row.update(arrangement_hit_odds(run["picks_by_shape"], reference["hits_by_shape"],
                                        reference["hits_by_arrangement"], prior))
        rows.append(row)
    return rows


def summary(rows: list) -> dict:
    return {name: {"mean": round(statistics.mean(r[name] for r in rows), 3),
                   "min": min(r[name] for r in rows), "max": max(r[name] for r in rows)} for name in ODDS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="LABEL=FILE",
                        help="bench_cold_round.py outputs (several files may share a label: their runs are pooled)")
    parser.add_argument("--db", action="append", required=True, help="the measured databases the odds read")
    parser.add_argument("--target-us", action="append", type=float, required=True)
    parser.add_argument("--arrangement-prior", type=float, default=2.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    runs = {}
    for item in args.files:
        label, sep, path = item.partition("=")
        if not sep or not path:
            parser.error(f"expected LABEL=FILE, got {item!r}")
        runs.setdefault(label, []).extend(read_json(path)["runs"])

    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()  # the databases' traces name the wmma intrinsics
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.tuning import open_database, records_for

    target = records_for(open_database(args.db[0]))[0].target
    analyzer = StaticAnalyzer.for_target(target)
    results = []
    for target_us in args.target_us:
        reference = database_reference(args.db, analyzer, target_us)
        for label, label_runs in runs.items():
            rows = rescore(label_runs, reference, args.arrangement_prior)
            result = {"label": label, "target_us": target_us, "seeds": len(rows), "summary": summary(rows),
                      "runs": rows}
            results.append(result)
            print(f"{target_us:g} us, {label} ({len(rows)} seeds): " + json.dumps(result["summary"]), flush=True)
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
