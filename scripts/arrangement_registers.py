"""What ptxas allots each fragment arrangement and wide fetch width of one measured record's tiling.

    python scripts/arrangement_registers.py --db RUN_DIR --record 202 --record 197 --out regs.json

For each record (its index in the run's database, measurement order): the record's own schedule, its
fragment arrangements (``search.arrangement``) and each of those at every wide operand fetch width
(``fetch_width.wide_fetch_variant_traces``): the ties the cold round's climb adds for its favourite
geometry. Each is replayed, estimated and compiled with nvcc as the builder lowers it
(``analysis.ptxas_checks``, no GPU), and the output is a Markdown table per record, arrangement by
fetch widths, of ptxas's registers for the first kernel, with the analyzer's estimates' spread.
"""

import argparse
import collections
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, valid_records, write_json  # noqa: E402


def record_table(record, measured_s: float) -> dict:
    from ms_pruner.analysis import StaticAnalyzer, operand_fetch_bytes
    from ms_pruner.database import replay_record
    from ms_pruner.evaluation import ptxas_checks
    from ms_pruner.search import DesignSpace, decision_values
    from ms_pruner.search.arrangement import arrangement_name, arrangement_variant_traces, fragment_arrangement
    from ms_pruner.search.fetch_width import with_wide_fetch_variants

    start = replay_record(record)
    analyzer = StaticAnalyzer.for_target(record.target)
    space = DesignSpace(record.workload.mod, record.target)
    own = start.trace.simplified(remove_postproc=True)
    traces = with_wide_fetch_variants([own] + arrangement_variant_traces(own))
    schedules = space.replay_valid(traces, random.Random(0))
    cells, estimates = collections.defaultdict(dict), []
    began = time.perf_counter()
    for sch in schedules:
        estimate = analyzer.estimate(sch.mod)
        checks = ptxas_checks(sch.mod, record.target, estimate, analyzer)
        fetch = "/".join(map(str, operand_fetch_bytes(estimate.features)))
        cells[arrangement_name(fragment_arrangement(sch.trace))][fetch] = checks[0].regs_ptxas if checks else None
        estimates.append(estimate.latency_s * 1e6)
    return {"record_decisions": list(decision_values(record.trace)), "measured_us": measured_s * 1e6,
            "own_arrangement": arrangement_name(fragment_arrangement(record.trace)),
            "own_fetch_bytes": list(operand_fetch_bytes(analyzer.estimate(start.mod).features)),
            "traces": len(traces), "valid": len(schedules),
            "estimate_us": [round(min(estimates), 2), round(max(estimates), 2)],
            "compile_s_per_schedule": (time.perf_counter() - began) / max(1, len(schedules)),
            "registers": {name: dict(sorted(row.items())) for name, row in sorted(cells.items())}}


def markdown(index: int, table: dict) -> str:
    fetches = sorted({f for row in table["registers"].values() for f in row},
                     key=lambda f: [-int(b) for b in f.split("/")])
    lines = [f"Record {index} ({table['measured_us']:.1f} us measured, {table['own_arrangement']}, "
             f"{'/'.join(map(str, table['own_fetch_bytes']))} B; decisions {' '.join(table['record_decisions'])}): "
             f"{table['valid']} schedules, estimated {table['estimate_us'][0]}-{table['estimate_us'][1]} us", "",
             "| arrangement | " + " | ".join(f"{f} B" for f in fetches) + " |",
             "| --- |" + " --- |" * len(fetches)]
    for name, row in table["registers"].items():
        lines.append(f"| {name} | " + " | ".join(str(row.get(f, "-")) for f in fetches) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a tuned run's work dir (or database)")
    parser.add_argument("--record", action="append", type=int, required=True,
                        help="a record's index in measurement order (repeatable)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    records = {index: (record, measured) for index, record, measured in valid_records(args.db)}
    missing = [i for i in args.record if i not in records]
    if missing:
        parser.error(f"no valid record {missing[0]} in {args.db}")
    tables = {}
    for index in args.record:
        tables[index] = record_table(*records[index])
        print(markdown(index, tables[index]), flush=True)
    if args.out:
        write_json(args.out, {"command": command_line(), "machine": machine(),
                              "records": {str(i): t for i, t in tables.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
