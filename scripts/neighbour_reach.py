"""How often one decision moved from a near-miss kernel reaches a target latency, on measured records.

    python scripts/neighbour_reach.py --db RUN [--db RUN ...] --target-us 442.1 [--margin 0.06] --out x.json

The follow-up round (docs/search.md) measures Droplet neighbours of the cold half's best kernel.
This asks the measured databases what such a move is worth: for every record measured between the
target and ``margin`` above it (a near miss, like a cold round's best), the records of the same
sketch that differ from it in exactly one sampled decision (``search.steps_apart``), and how many of
those measured at or below the target, beside the share at the target among all records up to
the margin (what a draw among near misses and hits would give), and both counts by what the one
decision sets (``by_decision``: a tile split, an operand's fetch width, the unroll depth, ...;
``search.decision_kinds``). Only what was measured counts: the
searches that made the records chose which neighbours exist, so this describes those neighbours,
not a random draw.
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, write_json  # noqa: E402


def measured(paths):
    """(latency in us, decision values, database, decision kinds) of every valid record of every database."""
    from ms_pruner.search import decision_kinds, decision_values
    from ms_pruner.database.records import is_valid, mean_latency, records_in_file_order

    rows = []
    for path in paths:
        for record in records_in_file_order(path):
            if is_valid(record):
                rows.append((mean_latency(record) * 1e6, decision_values(record.trace), path,
                             decision_kinds(record.trace)))
    return rows


def neighbour_reach(rows, target_us: float, margin: float) -> dict:
    """Per near miss: its latency, its measured one-decision neighbours, and those at the target."""
    from ms_pruner.search import steps_apart

    near = [r for r in rows if target_us < r[0] <= target_us * (1 + margin)]
    starts, pairs, hits = [], 0, 0
    by_decision = collections.defaultdict(lambda: {"pairs": 0, "at_target": 0})
    for latency, values, _, kinds in near:
        neighbours = [(lat, other) for lat, other, _, _ in rows if steps_apart(values, other) == 1]
        for lat, other in neighbours:
            moved = by_decision[next(kind for kind, a, b in zip(kinds, values, other) if a != b)]
            moved["pairs"] += 1
            moved["at_target"] += lat <= target_us
        around = sorted(lat for lat, _ in neighbours)
        reached = [lat for lat in around if lat <= target_us]
        starts.append({"latency_us": latency, "neighbours": len(around), "at_target": len(reached),
                       "best_neighbour_us": around[0] if around else None})
        pairs += len(around)
        hits += len(reached)
    with_neighbours = [s for s in starts if s["neighbours"]]
    at_target = sum(1 for r in rows if r[0] <= target_us)
    return {
        "records": len(rows), "at_target": at_target,
        "near_misses": len(near), "near_misses_with_a_measured_neighbour": len(with_neighbours),
        "near_misses_with_a_neighbour_at_target": sum(1 for s in with_neighbours if s["at_target"]),
        "neighbour_pairs": pairs, "neighbours_at_target": hits,
        "share_of_neighbours_at_target": hits / pairs if pairs else None,
        # For scale: a record drawn from the near misses and those at the target together.
        "share_at_target_among_near_misses_and_hits": at_target / max(1, at_target + len(near)),
        "neighbours_per_near_miss": collections.Counter(s["neighbours"] for s in starts).most_common(),
        "by_decision": {kind: {**counts, "share_at_target": counts["at_target"] / counts["pairs"]}
                        for kind, counts in sorted(by_decision.items(), key=lambda item: -item[1]["pairs"])},
        "starts": sorted(starts, key=lambda s: s["latency_us"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", required=True, help="MetaSchedule work dir (repeatable)")
    parser.add_argument("--target-us", type=float, required=True, help="the latency to reach, e.g. stock's best")
    parser.add_argument("--margin", type=float, default=0.06, help="near miss: within this share above the target")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    report = neighbour_reach(measured(args.db), args.target_us, args.margin)
    summary = {k: v for k, v in report.items() if k != "starts"}
    print(summary)
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(), "db": args.db,
                              "target_us": args.target_us, "margin": args.margin, **report})


if __name__ == "__main__":
    main()
