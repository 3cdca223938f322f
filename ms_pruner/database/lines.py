"""A database's two files as JSON lines: where one fails to parse, and setting bad lines aside.

MetaSchedule's JSONDatabase appends one line per workload and per record. A run killed in the middle
of a write leaves a line cut short, and JSONDatabase then refuses the whole database with a message
that names neither the file nor the line ("parallel_for_dynamic error with Unexpected end of
string"). ``describe_bad_lines`` says where; ``repair_database`` (``ms-pruner db repair``) moves the
bad record lines (and cut last workload lines) into ``<file>.bad`` and keeps every whole record, so
a rerun resumes. Nothing is deleted.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Optional, Tuple

from ..errors import UserError
from ..files import replace_file
from .writer_lock import sole_writer

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@dataclasses.dataclass
class BadLine:
    file: str
    number: int  # 1-based, counting blank lines, as an editor shows it
    why: str


def database_paths(path: str) -> Tuple[str, str]:
    """(workload file, record file) for a work dir or database dir."""
    return os.path.join(path, WORKLOAD_FILE), os.path.join(path, RECORD_FILE)


def require_database_files(path: str) -> None:
    """A one-line UserError unless ``path`` holds both files of a JSON database."""
    if not all(os.path.isfile(name) for name in database_paths(path)):
        raise UserError(f"no MetaSchedule database in '{path}' (expected {WORKLOAD_FILE} and {RECORD_FILE})")


def _read_lines(path: str) -> List[bytes]:
    """The file's lines as bytes, so that whatever is kept is written back unchanged."""
    with open(path, "rb") as handle:
        return handle.read().splitlines(keepends=True)


def _parse(text: bytes):
    try:
        return json.loads(text.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both
        return None


def _workload_problem(value) -> Optional[str]:
    if isinstance(value, list) and len(value) == 2:
        return None
    return "cut short or not JSON" if value is None else "not a [hash, module] pair"


def _record_problem(value, workloads: int) -> Optional[str]:
    if value is None:
        return "cut short or not JSON"
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int) and isinstance(value[1], list)):
        return "not a [workload index, record] pair"
    if not 0 <= value[0] < workloads:
        return f"names workload {value[0]}, and {WORKLOAD_FILE} holds {workloads}"
    return None


def _scan(path: str) -> Tuple[List[bytes], List[bytes], List[BadLine], List[BadLine]]:
    """Both files' lines and the bad ones of each (records checked against the whole workloads)."""
    workload_lines, record_lines = (_read_lines(name) for name in database_paths(path))
    bad_workloads = [BadLine(WORKLOAD_FILE, i + 1, why) for i, text in enumerate(workload_lines)
                     if text.strip() and (why := _workload_problem(_parse(text)))]
    whole = sum(1 for text in workload_lines if text.strip()) - len(bad_workloads)
    bad_records = [BadLine(RECORD_FILE, i + 1, why) for i, text in enumerate(record_lines)
                   if text.strip() and (why := _record_problem(_parse(text), whole))]
    return workload_lines, record_lines, bad_workloads, bad_records


def describe_bad_lines(path: str) -> Optional[str]:
    """'FILE line N of M: why' for the first bad line of the database at ``path`` (and how many
    more), or None when every line parses."""
    workload_lines, record_lines, bad_workloads, bad_records = _scan(path)
    bad = bad_workloads + bad_records
    if not bad:
        return None
    first = bad[0]
    total = len(workload_lines if first.file == WORKLOAD_FILE else record_lines)
    more = f" (and {len(bad) - 1} more bad lines)" if len(bad) > 1 else ""
    return f"{first.file} line {first.number} of {total}: {first.why}{more}"


@dataclasses.dataclass
class RepairReport:
    kept_records: int
    set_aside: int
    bad_files: List[str]


def _ended(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n"


def _set_aside(path: str, lines: List[bytes], bad: List[BadLine]) -> List[bytes]:
    """Append the bad lines to ``path``.bad, then rewrite ``path`` without them."""
    numbers = {line.number for line in bad}
    with open(path + ".bad", "ab") as handle:
        handle.writelines(_ended(lines[n - 1]) for n in sorted(numbers))
    kept = [text for i, text in enumerate(lines) if i + 1 not in numbers]
    replace_file(path, b"".join(_ended(line) for line in kept))
    return kept


def repair_database(path: str) -> RepairReport:
    """Set the database's bad lines aside (module doc). Bad workload lines can go only where no
    whole workload follows them (the last lines, cut short by a kill): removing an earlier one would
    renumber the workloads the records name, so that is refused and nothing is written."""
    require_database_files(path)
    with sole_writer(path, "db repair"):
        return _repaired(path)


def _repaired(path: str) -> RepairReport:
    workload_file, record_file = database_paths(path)
    workload_lines, record_lines, bad_workloads, bad_records = _scan(path)
    if bad_workloads:
        whole_before = sum(1 for text in workload_lines[:bad_workloads[0].number - 1] if text.strip())
        if whole_before + len(bad_workloads) != sum(1 for text in workload_lines if text.strip()):
            raise UserError(f"'{path}': {WORKLOAD_FILE} line {bad_workloads[0].number} is bad and whole workloads "
                            "follow it; setting it aside would renumber the workloads the records name")
    kept, bad_files = record_lines, []
    if bad_workloads:
        _set_aside(workload_file, workload_lines, bad_workloads)
        bad_files.append(workload_file + ".bad")
    if bad_records:
        kept = _set_aside(record_file, record_lines, bad_records)
        bad_files.append(record_file + ".bad")
    return RepairReport(kept_records=sum(1 for text in kept if text.strip()),
                        set_aside=len(bad_workloads) + len(bad_records), bad_files=bad_files)
