"""The analyzer's register estimate held against what ptxas allotted the same kernel.

The analyzer counts registers from the fragments a warp holds (features.py) and decides from
them whether a kernel spills and how many blocks an SM holds (gpu_model.py). ptxas's report
(``builder.resources``) is the real answer to both, available without a GPU, so a database or a
search round can be checked kernel by kernel: these are pure functions of an Estimate and the
report, and a summary over many. The compiled kernel's SASS adds the issue floor
(issue_bound.py): where ptxas's instruction order keeps a lone warp from issuing its MMAs faster.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import List, Optional, Sequence

from ..hardware import GPUSpec
from .gpu_model import blocks_per_sm, estimate_kernel, register_cap
from .issue_bound import kernel_issue_floors


@dataclasses.dataclass
class RegisterCheck:
    """One kernel: the analyzer's registers, spill call and residency beside ptxas's."""

    regs_estimate: float
    regs_ptxas: int
    spill_estimate: bool  # the estimate exceeds what a thread may have (255, or __launch_bounds__'s share)
    spill_ptxas: bool  # ptxas reports spill stores or loads
    stack_bytes: int
    blocks_per_sm_estimate: int
    blocks_per_sm_ptxas: int  # the same occupancy rule with ptxas's register count
    acc_fragments_per_warp: float
    latency_estimate_s: float
    # The same kernel estimated with ptxas's register count where ptxas does not spill (a spilled
    # kernel's count is the cap, not its need, so the analyzer's own count stays).
    latency_with_ptxas_regs_s: float
    # One warp's main loop issued as ptxas ordered it (builder.sass_issue), where the SASS was read.
    warp_trip_cycles: Optional[float] = None
    issue_floor_s: Optional[float] = None

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def check_registers(estimate, resources: Sequence, spec: GPUSpec, max_smem: Optional[int] = None,
                    issues: Optional[Sequence] = None) -> List[RegisterCheck]:
    """Pair each kernel of an Estimate with ptxas's report of it (both in launch order).

    ``resources`` are ``builder.KernelResources`` (registers, spill and stack bytes); ``max_smem``
    is the analyzer's shared-memory limit (``StaticAnalyzer.max_shared_memory``). A count mismatch
    (a kernel ptxas dropped or TVM split) pairs nothing rather than pairing wrongly. ``issues`` are
    the kernels' ``builder.sass_issue.LoopIssue`` (None each where the SASS was not read).
    """
    if not estimate.valid or len(estimate.features) != len(resources):
        return []
    if issues is None or len(issues) != len(resources):
        issues = [None] * len(resources)
    floors = kernel_issue_floors(estimate, issues, spec)
    checks = []
    for features, kernel, report, issue, floor in zip(estimate.features, estimate.kernels, resources, issues, floors):
        with_ptxas = dataclasses.replace(features, regs_per_thread=float(report.registers))
        rescored = kernel if report.spills else estimate_kernel(with_ptxas, spec, max_smem)
        checks.append(RegisterCheck(
            regs_estimate=features.regs_per_thread, regs_ptxas=report.registers,
            spill_estimate=features.regs_per_thread > register_cap(features, spec), spill_ptxas=report.spills,
            stack_bytes=report.stack_bytes,
            blocks_per_sm_estimate=kernel.blocks_per_sm, blocks_per_sm_ptxas=blocks_per_sm(with_ptxas, spec),
            acc_fragments_per_warp=features.acc_fragments_per_warp, latency_estimate_s=kernel.latency_s,
            latency_with_ptxas_regs_s=rescored.latency_s,
            warp_trip_cycles=issue.trip_cycles if issue is not None else None,
            issue_floor_s=floor))
    return checks


def summarize_register_checks(checks: Sequence[Optional[RegisterCheck]]) -> dict:
    """How often the analyzer's spill call and residency agree with ptxas, and its register error.

    The register error is over kernels neither side spills: a spilled kernel's count is the
    compiler's cap, not what the kernel needs.
    """
    present = [c for c in checks if c is not None]
    both_fit = [c for c in present if not c.spill_estimate and not c.spill_ptxas]
    errors = [c.regs_estimate - c.regs_ptxas for c in both_fit]
    return {
        "kernels": len(present),
        "spill_both": sum(c.spill_estimate and c.spill_ptxas for c in present),
        "spill_estimate_only": sum(c.spill_estimate and not c.spill_ptxas for c in present),
        "spill_ptxas_only": sum(c.spill_ptxas and not c.spill_estimate for c in present),
        "spill_neither": len(both_fit),
        "same_blocks_per_sm": sum(c.blocks_per_sm_estimate == c.blocks_per_sm_ptxas for c in present),
        "fewer_blocks_with_ptxas": sum(c.blocks_per_sm_ptxas < c.blocks_per_sm_estimate for c in present),
        "regs_error_median": statistics.median(errors) if errors else None,
        "regs_abs_error_median": statistics.median(abs(e) for e in errors) if errors else None,
    }
