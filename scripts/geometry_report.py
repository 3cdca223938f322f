"""Read a tuned run by kernel geometry and operand fetch widths (Markdown on stdout or --out).

    python -m ms_pruner analyze --db WORK_DIR --json > run.analyze.json
    python scripts/geometry_report.py run.analyze.json --per-round 64 --reference-us 473.6

Input is `ms-pruner analyze --json` of a work dir (gpu_session.sh writes one per compare run as
`<run>.analyze.json`): every record's estimate, measured latency, geometry and fetch widths in
measurement order. Output: one row per (geometry, A/B fetch bytes), best measured first, with how
many records each round measured there and the best estimate. With ``--reference-us`` (e.g. stock's
final best) it also says in which round the run first measured that fast, and in which groups: for a
Pruner run, whether round 0's analyzer-chosen shapes were the right ones.
"""

import argparse
import math
import sys
from typing import List, Optional

from _common import read_json
from ms_pruner.cli.options import write_text
from ms_pruner.evaluation import RecordEstimate, group_by_geometry


def load_records(path: str) -> List[RecordEstimate]:
    report = read_json(path)
    return [RecordEstimate(predicted_s=r["predicted_s"], measured_s=r["measured_s"], valid=r["valid"], reason="",
                           geometry=r.get("geometry"), fetch_bytes=r.get("fetch_bytes"),
                           arrangement=r.get("arrangement"))
            for r in report["records"]]


def _us(seconds: Optional[float]) -> str:
    return f"{seconds * 1e6:.1f}" if seconds is not None else "-"


def report(records: List[RecordEstimate], per_round: int, reference_us: Optional[float] = None,
           top: int = 30, by_arrangement: bool = False) -> str:
    groups = group_by_geometry(records, per_round, by_arrangement)
    valid = sum(g.records for g in groups)
    rounds = math.ceil(len(records) / per_round)
    shape = "geometry, A/B fetch bytes, arrangement" if by_arrangement else "geometry, A/B fetch bytes"
    extra = " arrangement |" if by_arrangement else ""
    lines = [f"{len(records)} records ({valid} valid with a GPU kernel), {rounds} rounds of {per_round}; "
             f"{len(groups)} groups of ({shape}), best measured first"
             + (f" (the first {top})" if len(groups) > top else "") + ".", "",
             f"| geometry | A/B fetch bytes |{extra} records | per round | best measured (us) | best estimate (us) |",
             "| --- | --- |" + (" --- |" if by_arrangement else "") + " --- | --- | --- | --- |"]
    for group in groups[:top]:
        fetch = "/".join(str(b) for b in group.fetch_bytes) if group.fetch_bytes else "-"
        arrangement = f" {group.arrangement or '-'} |" if by_arrangement else ""
        lines.append(f"| {group.geometry} | {fetch} |{arrangement} {group.records} | "
                     f"{' / '.join(map(str, group.per_round))} | "
                     f"{_us(group.best_measured_s)} | {_us(group.best_predicted_s)} |")
    if reference_us is not None:
        lines += ["", reached(records, per_round, reference_us)]
    return "\n".join(lines) + "\n"


def reached(records: List[RecordEstimate], per_round: int, reference_us: float) -> str:
    """Which round first measured at or below ``reference_us``, and which shapes did."""
    hits = [(index // per_round, r) for index, r in enumerate(records)
            if r.measured_s is not None and r.measured_s * 1e6 <= reference_us]
    if not hits:
        best = min((r.measured_s for r in records if r.measured_s is not None), default=None)
        return f"No record at or below {reference_us:.1f} us (best {_us(best)} us)."
    first = hits[0][0]
    shapes = sorted({(r.geometry, "/".join(map(str, r.fetch_bytes or []))) for rnd, r in hits if rnd == first})
    named = "; ".join(f"{geometry}, fetch {fetch}" for geometry, fetch in shapes)
    return (f"First at or below {reference_us:.1f} us: round {first} "
            f"({sum(1 for rnd, _ in hits if rnd == first)} records: {named}); {len(hits)} records in all.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("analyze_json", help="output of `ms-pruner analyze --db DIR --json`")
    parser.add_argument("--per-round", type=int, default=64, help="records a round measured (default 64)")
    parser.add_argument("--reference-us", type=float, default=None, help="a latency to reach, e.g. stock's final best")
    parser.add_argument("--top", type=int, default=30, help="rows at most (default 30)")
    parser.add_argument("--by-arrangement", action="store_true",
                        help="one row per fragment arrangement too (how a warp loops its fragments: "
                             "docs/search.md, 'Fragment arrangements in turn'); needs an analyze JSON that has it")
    parser.add_argument("--out", default=None, help="write the Markdown here instead of stdout")
    args = parser.parse_args(argv)
    records = load_records(args.analyze_json)
    if args.by_arrangement and all(r.arrangement is None for r in records):
        parser.error(f"{args.analyze_json} has no fragment arrangements: re-run `ms-pruner analyze --json` on the run")
    write_text(report(records, args.per_round, args.reference_us, args.top, args.by_arrangement), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
