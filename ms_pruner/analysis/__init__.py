"""PSA, the draft model: a static analyzer of scheduled TensorIR that estimates kernel latency.

``StaticAnalyzer(GPUSpec.h100()).estimate(schedule)`` walks the post-processed TIR of a
MetaSchedule candidate (thread bindings, scopes, tensor intrinsics, copy patterns) and turns it
into time with a per-SM model whose constants all come from the GPUSpec. See docs/analyzer.md.
"""

from .analyzer import ANALYSES, Estimate, StaticAnalyzer
from .features import KernelFeatures, kernel_features
from .geometry import geometry_name, has_narrow_fetch, kernel_geometry, operand_fetch_bytes
from .gpu_model import KernelEstimate, estimate_kernel
from .metrics import ndcg_at_k, recall_at_top, spearman
from .registers import RegisterCheck, check_registers, summarize_register_checks
from .tir_walk import walk_primfunc

__all__ = [
    "ANALYSES",
    "Estimate",
    "KernelEstimate",
    "KernelFeatures",
    "RegisterCheck",
    "StaticAnalyzer",
    "check_registers",
    "estimate_kernel",
    "geometry_name",
    "has_narrow_fetch",
    "kernel_features",
    "kernel_geometry",
    "ndcg_at_k",
    "operand_fetch_bytes",
    "recall_at_top",
    "spearman",
    "summarize_register_checks",
    "walk_primfunc",
]
