"""How many of a run's measurements repeated a kernel measured before, and which of them
``SameKernels`` (ms_pruner/search/same_kernel.py) would have dropped.

    python scripts/same_kernels.py --db work/<workload>/<run> [--db ...] --out ...

For every valid record, in measurement order: the SHA-256 of the CUDA (or C) source that code
generation emits for it (the truth: same source, same kernel), and whether ``SameKernels.repeats``
says it repeats a record measured before it. Per run: records, distinct kernels, repeats by the
source, records the check drops, and the two lists' differences (both should be empty); and how
far apart each repeated kernel's measurements lie (measurement noise on identical code).
"""

import argparse
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import command_line, machine, valid_records, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", action="append", required=True, help="a run's work dir (a JSON database)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ms_pruner.database import replay_record
    from ms_pruner.builder.worker import lower_candidate
    from ms_pruner.search.same_kernel import SameKernels

    runs = []
    for path in args.db:
        check = None
        first_of, rows = {}, []
        for index, record, measured in valid_records(path):
            check = check or SameKernels(record.target)
            sch = replay_record(record)
            executable = lower_candidate(sch.mod, record.target, use_nvcc=False)
            source = "".join(m.inspect_source("") for m in executable.mod.imports) or executable.mod.inspect_source("")
            digest = hashlib.sha256(source.encode()).hexdigest()
            check.new_batch()
            dropped = check.repeats(sch)
            check.note_measured(record.trace, sch.mod)
            rows.append({"record": index, "measured_us": measured * 1e6, "kernel": digest[:16],
                         "repeat_of": first_of.get(digest), "dropped": dropped})
            first_of.setdefault(digest, index)
        repeats = [r["record"] for r in rows if r["repeat_of"] is not None]
        dropped = [r["record"] for r in rows if r["dropped"]]
        measured_us = {r["record"]: r["measured_us"] for r in rows}
        pairs = [(r["measured_us"], measured_us[r["repeat_of"]]) for r in rows if r["repeat_of"] is not None]
        spread = [max(pair) / min(pair) - 1 for pair in pairs]
        summary = {"db": os.path.normpath(path), "records": len(rows), "kernels": len(first_of),
                   "repeats": len(repeats), "dropped": len(dropped),
                   "repeats_not_dropped": sorted(set(repeats) - set(dropped)),
                   "dropped_not_repeats": sorted(set(dropped) - set(repeats)),
                   "lowered": check.lowered,
                   "repeat_spread_max": max(spread, default=None),
                   "repeat_spread_median": sorted(spread)[len(spread) // 2] if spread else None}
        print(summary)
        runs.append(dict(summary, rows=rows))
    write_json(args.out, {"command": command_line(), "machine": machine(), "runs": runs})


if __name__ == "__main__":
    main()
