"""``ms-pruner db``: what databases hold, several merged into one, the best record of each workload.

A record carries its own target, so one database may hold records for several targets; a merge
keeps each record's target and says which targets it put together, never silently.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

from tvm.s_tir import meta_schedule as ms

from ..errors import UserError
from .records import (best_record, group_by_workload, is_valid, mean_latency, open_database,
                      record_lines_in_file_order, records_in_file_order, structural_key)
from .transfer import workload_name
from .writer_lock import sole_writer


@dataclasses.dataclass
class WorkloadSummary:
    """One workload of a database, for one target."""

    workload: str  # its parameters' shapes and dtypes, and its blocks (database/transfer.py)
    target: str
    records: int
    valid: int
    best_s: float


def target_name(target) -> str:
    arch = target.attrs.get("arch", "")
    return f"{target.kind.name}{' ' + str(arch) if arch else ''}"


def records_by_workload_and_target(path: str) -> List[list]:
    """The records of the database at ``path`` (``RecordLine``s: a trace is replayed when read), one
    list per workload and target, in file order."""
    groups: Dict[tuple, list] = {}
    for key, records in group_by_workload(record_lines_in_file_order(path)).items():
        for record in records:
            groups.setdefault((key, str(record.target)), []).append(record)
    return list(groups.values())


def list_database(path: str) -> List[WorkloadSummary]:
    """The workloads of the database at ``path``, by target: record counts and best latency."""
    rows = []
    for records in records_by_workload_and_target(path):
        best = best_record(records)
        rows.append(WorkloadSummary(workload_name(records[0].workload.mod), target_name(records[0].target),
                                    len(records), sum(1 for r in records if is_valid(r)),
                                    mean_latency(best) if best is not None else float("inf")))
    return sorted(rows, key=lambda row: (row.workload, row.target))


def merge_databases(sources: Sequence[str], out: str, best_only: bool = False) -> Dict[str, int]:
    """Every record of ``sources`` (in their measurement order) into the database at ``out``,
    each with its own target; with ``best_only`` just the best valid record of each workload and
    target. Returns the records written by target."""
    if not sources:
        raise UserError("ms-pruner db needs at least one database to read")
    records = [r for path in sources for r in records_in_file_order(path)]  # a bad source writes nothing
    if best_only:
        chosen = {}
        for record in records:
            key = (structural_key(record.workload.mod), str(record.target))
            if is_valid(record) and (key not in chosen or mean_latency(record) < mean_latency(chosen[key])):
                chosen[key] = record
        records = list(chosen.values())
    written: Dict[str, int] = {}
    with sole_writer(out, "db merge"):
        target_db = open_database(out, create=True)
        for record in records:
            workload = target_db.commit_workload(record.workload.mod)
            target_db.commit_tuning_record(ms.database.TuningRecord(record.trace, workload, record.run_secs,
                                                                    record.target, record.args_info))
            name = target_name(record.target)
            written[name] = written.get(name, 0) + 1
    return written
