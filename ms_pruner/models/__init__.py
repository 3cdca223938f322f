"""Whole models: torch definitions, the Relax import, a user's Relax module, and tune_relax with PrunerSearch."""

from .compile import compile_tuned, export_model
from .definitions import MODELS, ModelSpec, get_model
from .relax_flow import (RelaxTuneResult, compare_outputs, extract_tasks, import_torch_model, legalize_and_fuse,
                         prepared_relax, run_executable, run_library, tune_relax)
from .relax_model import DEFAULT_BUILD, RelaxModel, default_build
from .torch_timing import torch_latency

__all__ = [
    "DEFAULT_BUILD",
    "MODELS",
    "ModelSpec",
    "RelaxModel",
    "RelaxTuneResult",
    "compare_outputs",
    "compile_tuned",
    "default_build",
    "export_model",
    "extract_tasks",
    "get_model",
    "import_torch_model",
    "legalize_and_fuse",
    "prepared_relax",
    "run_executable",
    "run_library",
    "torch_latency",
    "tune_relax",
]
