"""Evaluation of what tuning produced: the analyzer on a measured database (``evaluate_database``,
``ms-pruner analyze``) and ranking models trained on a run's first part and scored on the rest
(``evaluate_runs``, ``ms-pruner evaluate-model``). It reads every other component and none reads it."""

from .database_report import (DatabaseReport, GeometryGroup, RecordEstimate, evaluate_database, group_by_geometry,
                              ptxas_checks, register_summary)
from .family_scores import family_scores
from .model_ranking import METRICS, MODELS, by_round, evaluate_models, evaluate_runs, load_measured, load_run

__all__ = [
    "DatabaseReport",
    "GeometryGroup",
    "METRICS",
    "MODELS",
    "RecordEstimate",
    "by_round",
    "evaluate_database",
    "evaluate_models",
    "evaluate_runs",
    "family_scores",
    "group_by_geometry",
    "load_measured",
    "load_run",
    "ptxas_checks",
    "register_summary",
]
