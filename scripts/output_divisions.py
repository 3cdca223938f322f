"""Measured over estimated latency of a run's records by whether their output address divides.

    python scripts/output_divisions.py --db work/<workload>/<run> [--db ...] --out ...

For every measured record: the write-back divisions the analyzer counts on the flattened output
address (``index_cost.lowered_flat_address``), whether the CUDA that code generation emits really divides
in an output store (``divides_in_output_address``, the truth the count approximates), and the
measured and estimated latency. The summary groups the records by the two and gives the median of
measured over estimated in each group, so both the effect and the count's misses show.
"""

import argparse
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, divides_in_output_address, machine, valid_records, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", action="append", required=True, help="a run's work dir (a JSON database)")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.database import replay_record
    from ms_pruner.analysis.features import is_shared
    from ms_pruner.hardware import get_gpu_spec

    rows = []
    for path in args.db:
        analyzer = None
        for index, record, measured in valid_records(path):
            if analyzer is None:
                analyzer = StaticAnalyzer.for_target(record.target, gpu=get_gpu_spec(args.gpu))
            mod = replay_record(record).mod
            estimate = analyzer.estimate(mod)
            if not estimate.valid:
                continue
            counted = sum(c.address_divisions for k in estimate.features for c in k.copies
                          if not is_shared(c.dst_scope))
            rows.append({"db": os.path.normpath(path), "record": index, "measured_us": measured * 1e6,
                         "estimate_us": estimate.latency_s * 1e6, "output_divisions_counted": counted,
                         "generated_divides": divides_in_output_address(mod, record.target)})
    groups = collections.defaultdict(list)
    for row in rows:
        groups[row["generated_divides"], row["output_divisions_counted"] > 0].append(
            row["measured_us"] / row["estimate_us"])
    summary = [{"generated_divides": generated, "analyzer_counts_divisions": counted, "records": len(ratios),
                "measured_over_estimate_median": statistics.median(ratios)}
               for (generated, counted), ratios in sorted(groups.items())]
    for line in summary:
        print(line)
    write_json(args.out, {"command": command_line(), "machine": machine(), "summary": summary, "records": rows})


if __name__ == "__main__":
    main()
