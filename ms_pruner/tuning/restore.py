"""Going on, on another machine, with a comparison an earlier session left unfinished.

A GPU machine used for a session only keeps nothing after it, the work dirs of a comparison its
end cut included. What the session committed, its ``compare.json`` and an archive of its work
dirs, is enough to go on: ``restore_comparison`` puts them where ``compare --out`` finds them
(``ms-pruner restore``).
"""

from __future__ import annotations

import os
import tarfile
from typing import Iterable, Tuple

from ..database.lines import RECORD_FILE
from ..errors import UserError
from ..files import make_folder, replace_json
from .compare import read_report, summarize


def restore_comparison(report_path: str, archive_path: str, out_dir: str, settings: dict,
                       rerun: Iterable[Tuple[str, str]] = ()) -> dict:
    """Put a comparison made on another machine where ``compare --out out_dir`` goes on with it.

    ``report_path`` is its compare.json, ``archive_path`` an archive of its work dirs
    (``work/<workload>/<run>/`` with the databases and round logs). The finished runs stay finished,
    and a run left ``pending`` resumes from its records (tune_tir), its clock counting its finished rounds.
    The runs must go on under the same settings (target string included, so the same kind of GPU);
    their work dirs are moved under ``out_dir``. Returns the restored report.

    ``rerun`` names (workload spec, strategy) pairs whose finished run the next ``compare`` makes
    again, from scratch, while the runs that are still comparable stay: code that changed since (the
    search, the runner) makes an old run a poor measure of the new one. The old run moves to the
    entry's ``superseded`` (its records stay unpacked), so compare.md still reports what it reached.
    """
    report = read_report(report_path, settings, "its runs cannot go on here")
    _supersede(report, rerun)
    if os.path.exists(os.path.join(out_dir, "compare.json")):
        raise UserError(f"{out_dir} already holds a comparison; restore into an empty directory")
    moved = []
    for entry in report.get("workloads", {}).values():
        for run in entry.get("runs", {}).values():
            run["work_dir"] = _moved_work_dir(run["work_dir"], out_dir)
            moved.append(run["work_dir"])
        pending = entry.get("pending", {})
        for strategy, work_dir in pending.items():
            pending[strategy] = _moved_work_dir(work_dir, out_dir)
            moved.append(pending[strategy])
        for runs in entry.get("superseded", {}).values():
            for run in runs:
                run["work_dir"] = _moved_work_dir(run["work_dir"], out_dir)
    make_folder(out_dir, "comparison folder")
    try:
        with tarfile.open(archive_path) as archive:
            outside = [m.name for m in archive.getmembers()
                       if os.path.normpath(m.name).replace(os.sep, "/").split("/")[0] != "work"]
            if outside:
                raise UserError(f"{archive_path} holds {outside[0]}, outside work/; not a comparison's work dirs")
            archive.extractall(out_dir, filter="data")
    except (OSError, tarfile.TarError) as err:
        raise UserError(f"cannot unpack {archive_path}: {err}") from err
    missing = [d for d in moved if not os.path.exists(os.path.join(d, RECORD_FILE))]
    if missing:
        raise UserError(f"{archive_path} has no database for {missing[0]}")
    replace_json(os.path.join(out_dir, "compare.json"), report)
    return report


def _supersede(report: dict, rerun: Iterable[Tuple[str, str]]) -> None:
    """Move each named finished run of ``report`` to its entry's ``superseded`` list."""
    for spec, strategy in rerun:
        entry = report.get("workloads", {}).get(spec)
        if entry is None:
            raise UserError(f"cannot rerun {strategy} on {spec}: the comparison has no such workload "
                            f"(it has {', '.join(sorted(report.get('workloads', {}))) or 'none'})")
        if strategy not in entry.get("runs", {}):
            raise UserError(f"cannot rerun {strategy} on {spec}: the comparison has no finished {strategy} run of it")
        entry.setdefault("superseded", {}).setdefault(strategy, []).append(entry["runs"].pop(strategy))
        entry["summary"] = summarize(entry["runs"])


def _moved_work_dir(work_dir: str, out_dir: str) -> str:
    """``<old out>/work/<workload>/<run>`` -> ``<out_dir>/work/<workload>/<run>``."""
    parts = work_dir.replace(os.sep, "/").split("/work/", 1)
    if len(parts) != 2:
        raise UserError(f"work dir {work_dir} is not under a comparison's work/")
    return os.path.join(out_dir, "work", *parts[1].split("/"))
