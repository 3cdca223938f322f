"""Whole models: torch definitions, the Relax import, and tune_relax with PrunerSearch."""

from .compile import compile_tuned
from .definitions import MODELS, ModelSpec, get_model
from .relax_flow import (RelaxTuneResult, compare_outputs, extract_tasks, import_torch_model, legalize_and_fuse,
                         run_executable, tune_relax)
from .torch_timing import torch_latency

__all__ = [
    "MODELS",
    "ModelSpec",
    "RelaxTuneResult",
    "compare_outputs",
    "compile_tuned",
    "extract_tasks",
    "get_model",
    "import_torch_model",
    "legalize_and_fuse",
    "run_executable",
    "torch_latency",
    "tune_relax",
]
