"""What the follow-up's Droplet picks move: the cost model's best-ranked neighbours after a cold half.

    python scripts/droplet_ranking.py --db RUN [--db RUN ...] [--first 32] [--seeds 0,1,2] --out x.json

The follow-up rounds (docs/search.md) give half their picks to the Droplet neighbours of the best
kernel measured, ranked by the cost model alone. A model that has learned a few dozen records could
rank first the moves that change least (an unroll depth, the write-back's vector length), which on
the H100 matmul records rarely reached stock's best (``scripts/neighbour_reach.py``, ``by_decision``).
For each database this trains PaCM on its first ``--first`` records in measurement order (as the
cold half's), builds up to 64 neighbours of the best of them (``search.droplet.neighbours``), ranks
them, and counts what the one decision moved (``search.decision_kinds``) among all of them and among
the best-ranked 8 and 16 (a follow-up slice's Droplet share, and a whole follow-up's). No GPU.
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, tune_context, write_json  # noqa: E402


def ranked_moves(path: str, first: int, seed: int, limit: int = 64) -> dict:
    from ms_pruner.cost_model import PaCM
    from ms_pruner.evaluation.model_ranking import load_measured
    from ms_pruner.search import decision_kinds, decision_values
    from ms_pruner.search.droplet import neighbours
    from ms_pruner.search.space import DesignSpace
    from ms_pruner.database.records import measure_candidate, measured_batch

    records, schedules, latency = load_measured(path)
    context = tune_context(records[0].workload.mod, records[0].target, "evolutionary", seed, 2)
    kept = [i for i in range(min(first, len(records))) if schedules[i] is not None]
    model = PaCM(seed=seed)
    model.update(context, *measured_batch([schedules[i] for i in kept], [latency[i] for i in kept]))
    best = min(kept, key=lambda i: latency[i])
    base = records[best].trace
    kinds, values = decision_kinds(base), decision_values(base)
    found = neighbours(DesignSpace(context.mod, records[0].target, context=context), base, limit, seed)
    scores = model.predict(context, [measure_candidate(s) for s in found])
    order = sorted(range(len(found)), key=lambda i: -float(scores[i]))

    def moved(sch) -> str:
        return next(k for k, a, b in zip(kinds, values, decision_values(sch.trace)) if a != b)

    def count(indices) -> dict:
        return dict(collections.Counter(moved(found[i]) for i in indices).most_common())

    return {"db": path, "seed": seed, "trained_on": len(kept), "best_us": float(latency[best]) * 1e6,
            "neighbours": len(found), "all": count(range(len(found))), "best_8": count(order[:8]),
            "best_16": count(order[:16])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", action="append", required=True)
    parser.add_argument("--first", type=int, default=32)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for path in args.db:
        for seed in (int(s) for s in args.seeds.split(",")):
            rows.append(ranked_moves(path, args.first, seed))
            print(rows[-1], flush=True)
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(), "first": args.first, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
