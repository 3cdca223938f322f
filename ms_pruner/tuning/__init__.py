"""Tuning driver: strategy selection, resume, per-round timing, reading work dirs."""

from .driver import STRATEGIES, TuneResult, search_components, tune_tir
from .records import best_record, describe_best, mean_latency, open_database, records_for, summarize_trace

__all__ = [
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
