"""A tuned run read by kernel geometry and operand fetch widths (``ms-pruner geometry``).

One row per (geometry, A/B fetch bytes[, fragment arrangement]), best measured first, with how many
records each round measured there and the best estimate; with a reference latency (stock's final
best, say), the round that first measured that fast and the shapes that did. For a Pruner run this
says whether round 0's analyzer-chosen shapes were the right ones.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from typing import List, Optional

from ..errors import UserError
from ..units import microseconds
from .database_report import RecordEstimate, evaluate_database, group_by_geometry, record_from_json


def load_estimates(source: str, gpu: Optional[str] = None) -> List[RecordEstimate]:
    """The records of a work dir (analyzed now) or of an ``ms-pruner analyze --json`` file
    (``.json`` or ``.json.gz``), in measurement order."""
    if os.path.isdir(source):
        return evaluate_database(source, gpu=gpu).records
    if not os.path.isfile(source):
        raise UserError(f"no work dir or analyze JSON at '{source}'")
    try:
        with (gzip.open(source, "rt") if source.endswith(".gz") else open(source)) as handle:
            report = json.load(handle)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read '{source}' as JSON ({type(error).__name__})") from None
    if not isinstance(report, dict) or not isinstance(report.get("records"), list):
        raise UserError(f"'{source}' is not the output of 'ms-pruner analyze --json' (no records list)")
    return [record_from_json(row) for row in report["records"]]


def geometry_table(records: List[RecordEstimate], per_round: int, reference_us: Optional[float] = None,
                   top: int = 30, by_arrangement: bool = False) -> str:
    """The Markdown table (and the reference sentence) for ``records``."""
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
                     f"{microseconds(group.best_measured_s)} | {microseconds(group.best_predicted_s)} |")
    if reference_us is not None:
        lines += ["", reached(records, per_round, reference_us)]
    return "\n".join(lines) + "\n"


def reached(records: List[RecordEstimate], per_round: int, reference_us: float) -> str:
    """Which round first measured at or below ``reference_us``, and which shapes did."""
    hits = [(index // per_round, r) for index, r in enumerate(records)
            if r.measured_s is not None and r.measured_s * 1e6 <= reference_us]
    if not hits:
        best = min((r.measured_s for r in records if r.measured_s is not None), default=None)
        return f"No record at or below {reference_us:.1f} us (best {microseconds(best)} us)."
    first = hits[0][0]
    shapes = sorted({(r.geometry, "/".join(map(str, r.fetch_bytes or []))) for rnd, r in hits if rnd == first})
    named = "; ".join(f"{geometry}, fetch {fetch}" for geometry, fetch in shapes)
    return (f"First at or below {reference_us:.1f} us: round {first} "
            f"({sum(1 for rnd, _ in hits if rnd == first)} records: {named}); {len(hits)} records in all.")
