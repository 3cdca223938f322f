"""The issue floor: a kernel cannot finish before its warps have issued their main loops alone.

``builder.sass_issue`` issues a compiled kernel's main loop for one warp, with the waits ptxas
wrote into it (``LoopIssue``). A warp's whole share of the MMAs at that pace, one wave after
another, is a time no resource model of the TIR sees: it is what ptxas's instruction order costs
where fragments are loaded just before their MMAs. A kernel's estimate is lifted to its floor
where the floor is higher and kept where it is not: a floor under the estimate says nothing about
it (an L4 blend, as concurrent units combine, reordered the H200 matmul's hundreds of ties by
floors half their estimates and lost its recall: docs/analyzer.md).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from ..hardware import GPUSpec
from .features import KernelFeatures
from .gpu_model import L1_LATENCY_CYCLES, SHARED_LATENCY_CYCLES, KernelEstimate

# Variable-latency instructions the tables above do not name (S2R, LDC, shuffles, shared stores'
# register reads): about a shared-memory access.
OTHER_LATENCY_CYCLES = 20
SUB_PARTITIONS = 4  # an SM's schedulers, each with its own tensor pipe (Volta to Hopper)


def issue_latencies(spec: GPUSpec) -> Tuple[Dict[str, float], float]:
    """(cycles after issue at which each family's scoreboard is released, the rest's): the
    analyzer's shared and L1 latencies, the GPU's L2 load-to-use latency for global loads."""
    return ({"LDSM": SHARED_LATENCY_CYCLES, "LDS": SHARED_LATENCY_CYCLES, "LDG": spec.l2_latency_cycles,
             "LDL": L1_LATENCY_CYCLES}, OTHER_LATENCY_CYCLES)


def issue_floor_s(issue, features: KernelFeatures, kernel: KernelEstimate, spec: GPUSpec) -> Optional[float]:
    """Seconds the kernel's waves take if a trip lasts a lone warp's trip at ``issue``'s pace (a
    ``LoopIssue``, scaled by MMA flops to the TIR's trips) plus the tensor-pipe time of the other
    warps resident on its sub-partition; None where there is nothing to scale (no MMAs).

    The trip's barriers keep a block's warps in step, so their waits for fragments coincide and
    do not hide one another; the other warps' MMAs then take their turns on the shared pipe."""
    warps = features.grid * features.warps_per_block
    if issue is None or not issue.mma_flops or not features.mma_flops or not warps:
        return None
    trips = max(1, features.main_loop_trips)
    lone_trip = issue.cycles_per_flop() * features.mma_flops / warps / trips
    active = min(kernel.blocks_per_sm, max(1, math.ceil(features.grid / spec.sm_count)))
    per_sub_partition = max(1.0, active * features.warps_per_block / SUB_PARTITIONS)
    others = active * kernel.tensor_cycles * (1.0 - 1.0 / per_sub_partition)
    return kernel.waves * trips * (lone_trip + others) / spec.clock_hz


def with_issue_floor(latency_s: float, floor_s: Optional[float]) -> float:
    """The estimate, or the issue floor where that is higher."""
    return latency_s if floor_s is None else max(latency_s, floor_s)


def kernel_issue_floors(estimate, issues: Sequence, spec: GPUSpec) -> List[Optional[float]]:
    """``issue_floor_s`` of each kernel of an analyzer Estimate, paired in launch order with the
    compiled kernels' ``LoopIssue`` (None each where a kernel has no MMA loop; all None where the
    counts differ: a kernel ptxas dropped or TVM split pairs nothing rather than wrongly)."""
    if not estimate.valid or len(issues) != len(estimate.kernels):
        return [None] * len(estimate.kernels)
    return [issue_floor_s(issue, features, kernel, spec)
            for issue, features, kernel in zip(issues, estimate.features, estimate.kernels)]
