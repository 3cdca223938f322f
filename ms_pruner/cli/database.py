"""``db list``, ``db merge``, ``db best`` and ``db repair``: MetaSchedule databases read, put
together, and loadable again after a run was killed mid-write."""

from __future__ import annotations

import math

from ..database import repair_database
from ..database.lines import require_database_files
from ..database.tools import list_database, merge_databases


def add_database_commands(sub) -> None:
    db = sub.add_parser("db", help="list, merge, take the best of or repair MetaSchedule databases (work dirs)")
    commands = db.add_subparsers(dest="db_command", required=True)
    listing = commands.add_parser("list", help="workloads, targets, record counts and best latency of each database")
    listing.add_argument("dbs", nargs="+", metavar="DB")
    listing.set_defaults(func=cmd_db_list)
    for name, what in (("merge", "every record of several databases into one, each keeping its target"),
                       ("best", "the best record of each workload and target of several databases into one")):
        command = commands.add_parser(name, help=what)
        command.add_argument("dbs", nargs="+", metavar="DB")
        command.add_argument("--out", required=True, help="the database (work dir) to write into")
        command.set_defaults(func=cmd_db_merge, best_only=name == "best")
    repair = commands.add_parser("repair", help="set a database's unreadable lines (a run killed mid-write) aside "
                                                "into <file>.bad and keep every whole record")
    repair.add_argument("db", metavar="DB")
    repair.set_defaults(func=cmd_db_repair)


def cmd_db_list(args) -> int:
    for path in args.dbs:  # a missing database is its one line, before any output
        require_database_files(path)
    for path in args.dbs:
        print(f"{path}:")
        for row in list_database(path):
            best = f"{row.best_s * 1e6:.1f} us" if math.isfinite(row.best_s) else "none valid"
            print(f"  {row.workload} on {row.target}: {row.records} records ({row.valid} valid), best {best}")
    return 0


def cmd_db_merge(args) -> int:
    written = merge_databases(args.dbs, args.out, best_only=args.best_only)
    targets = ", ".join(f"{count} for {target}" for target, count in sorted(written.items()))
    mixed = f"; {len(written)} targets, each record keeping its own" if len(written) > 1 else ""
    print(f"wrote {sum(written.values())} records into {args.out}: {targets}{mixed}")
    return 0


def cmd_db_repair(args) -> int:
    report = repair_database(args.db)
    if not report.set_aside:
        print(f"{args.db}: every line reads; {report.kept_records} records, nothing changed")
        return 0
    print(f"{args.db}: set {report.set_aside} bad lines aside into {', '.join(report.bad_files)}; "
          f"{report.kept_records} records kept")
    return 0
