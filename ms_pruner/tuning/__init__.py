"""Tuning driver: strategy selection, resume, per-round timing; the database helpers it re-exports live in ms_pruner.database."""

from .driver import PRUNER_STRATEGIES, STRATEGIES, TuneResult, search_components, tune_tir
from ..database.records import best_record, describe_best, mean_latency, open_database, records_for, summarize_trace

__all__ = [
    "PRUNER_STRATEGIES",
    "STRATEGIES",
    "TuneResult",
    "best_record",
    "describe_best",
    "mean_latency",
    "open_database",
    "records_for",
    "search_components",
    "summarize_trace",
    "tune_tir",
]
