"""The tuning database: work-dir I/O, records in measurement order, their latencies, and the
schedule a record measured (``replay_record``). Everything that reads or writes MetaSchedule
records goes through here (``repair_database`` makes one that a killed run left cut short load
again; ``sole_writer`` lets one process write a work dir at a time); nothing here depends on the
search, the cost model or the driver."""

from .lines import repair_database
from .records import (FAILED_RUN_SECONDS, best_record, database_paths, describe_best, group_by_workload, is_valid,
                      mean_latency, open_database, records_for, records_in_file_order, replay_record,
                      replayed_in_file_order, same_target, same_workload, summarize_trace, workload_flops)
from .writer_lock import sole_writer

__all__ = [
    "FAILED_RUN_SECONDS",
    "best_record",
    "database_paths",
    "describe_best",
    "group_by_workload",
    "is_valid",
    "mean_latency",
    "open_database",
    "records_for",
    "records_in_file_order",
    "repair_database",
    "replay_record",
    "replayed_in_file_order",
    "same_target",
    "same_workload",
    "sole_writer",
    "summarize_trace",
    "workload_flops",
]
