"""ms_pruner: draft-then-verify search for Apache TVM MetaSchedule (Pruner / MoA-Pruner).

Importing the package is cheap: TVM, torch and the tensor intrinsics load only when a
sub-package that needs them is used. The main entry points::

    ms_pruner.tune_tir(mod, target, work_dir, max_trials, strategy="pruner")
    ms_pruner.tune_relax(mod, params, target, work_dir, max_trials_global, strategy="pruner")
    ms.tune_tir(..., strategy=ms_pruner.PrunerSearch(), cost_model=ms_pruner.PaCM())
    ms_pruner.export_best(work_dir, "kernel.so")  # the best kernel, built as it was measured
    ms_pruner.export_model(result.executable, target, "model.so")  # a tune_relax result's model
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "PaCM": ("ms_pruner.cost_model", "PaCM"),
    "PrunerSearch": ("ms_pruner.search", "PrunerSearch"),
    "PrunerConfig": ("ms_pruner.search", "PrunerConfig"),
    "FirstRoundConfig": ("ms_pruner.search", "FirstRoundConfig"),
    "StaticAnalyzer": ("ms_pruner.analysis", "StaticAnalyzer"),
    "GPUSpec": ("ms_pruner.hardware", "GPUSpec"),
    "make_builder": ("ms_pruner.builder", "make_builder"),
    "tune_relax": ("ms_pruner.models", "tune_relax"),
    "export_best": ("ms_pruner.tuning.export", "export_best"),
    "export_model": ("ms_pruner.models", "export_model"),
}


def tune_tir(mod, target, work_dir, max_trials, strategy="pruner", **kwargs):
    """Tune a PrimFunc (or an IRModule of one) with ``strategy`` ("pruner", "moa" or "stock") into ``work_dir``.

    ``target`` is a ``tvm.target.Target``, or what ``ms-pruner tune --target`` accepts ("llvm",
    "cuda", "h100", "nvidia/nvidia-a100", a JSON dict, or a dict). Keyword arguments go to
    ``ms_pruner.tuning.tune_tir`` (builder, runner, seed, num_trials_per_iter, pretrained, ...).
    """
    from .tuning import tune_tir as _tune_tir  # lazy: importing the package stays free of TVM

    if isinstance(target, (str, dict)):
        from .hardware import resolve_target  # lazy: (the same)

        target = resolve_target(target, require_device=False).target
    return _tune_tir(mod, target, work_dir, max_trials, strategy=strategy, **kwargs)


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ms_pruner' has no attribute {name!r}")
