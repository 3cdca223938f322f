"""The cold round's analyzer climb (``search.climb.climb``) from one measured record, no GPU.

    python scripts/climb_from_record.py [--db WORK_DIR] [--record N] [--seeds 0,1,2] --out climb.json

Starts from record ``N`` of the database in file order (default: its fastest valid record; the
default database is the shared H100 4096^3 matmul one) and climbs with each random stream of
``--seeds`` at the cold round's defaults (``cold_climb_steps``, ``cold_climb_moves``): where the
climb ends, by estimate and kernel geometry. Shows whether a start the single tile moves cannot
leave is left by the reshapes (docs/search.md, "Reshapes where the climb stalls").
"""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import H100_MM4096, command_line, machine, valid_records, write_json  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=H100_MM4096)
    parser.add_argument("--record", type=int, default=None, help="file-order index (default: the fastest valid)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from ms_pruner.analysis import StaticAnalyzer, geometry_name, kernel_geometry
    from ms_pruner.database import replay_record
    from ms_pruner.search import DesignSpace, tile_decisions
    from ms_pruner.search.climb import climb
    from ms_pruner.search.defaults import DEFAULTS

    records = {index: (record, measured) for index, record, measured in valid_records(args.db)}
    index = args.record if args.record is not None else min(records, key=lambda i: records[i][1])
    record, measured = records[index]
    analyzer = StaticAnalyzer.for_target(record.target)
    space = DesignSpace(record.workload.mod, record.target)
    start = replay_record(record)

    def describe(sch) -> dict:
        estimate = analyzer.estimate(sch.mod)
        return {"estimate_us": estimate.latency_s * 1e6, "geometry": geometry_name(kernel_geometry(estimate.features)),
                "tiles": [list(t) for t in tile_decisions(sch.trace)]}

    report = {"command": command_line(), "machine": machine(), "db": args.db, "record": index,
              "measured_us": measured * 1e6, "start": describe(start), "climbs": []}
    print(f"record {index}: {measured * 1e6:.1f} us measured, {report['start']['estimate_us']:.1f} us estimated, "
          f"{report['start']['geometry']}")
    for seed in (int(s) for s in args.seeds.split(",")):
        began = time.perf_counter()
        visited = climb(space, start, lambda s: analyzer.estimate(s.mod).latency_s, DEFAULTS["cold_climb_steps"],
                        DEFAULTS["cold_climb_moves"], random.Random(seed))
        ends = [describe(sch) for sch in visited]
        best = min(ends + [report["start"]], key=lambda end: end["estimate_us"])
        report["climbs"].append(dict(best, seed=seed, visited=len(visited), seconds=time.perf_counter() - began))
        print(f"seed {seed}: ends at {best['estimate_us']:.1f} us, {best['geometry']} ({len(visited)} visited)")
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
