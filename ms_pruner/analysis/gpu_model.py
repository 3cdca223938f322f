"""Latency of one GPU kernel from its KernelFeatures and a GPUSpec: a per-SM, per-trip model.

A tensor-core kernel from MetaSchedule's multi-level tiling is a main loop: each trip copies a
slice of the operands from global to shared memory, synchronises, loads fragments and issues
MMAs. Blocks resident on one SM interleave, so one SM-trip lasts as long as the busiest shared
unit needs for all resident blocks (tensor cores, the shared-memory pipe, the L2 link, the issue
slots), but never less than one block's own critical path (its copy latency plus its compute).
Waves of resident blocks run one after another; an epilogue writes the result. Every throughput
and limit comes from GPUSpec; the only fixed numbers are ISA facts (bytes per shared-memory
wavefront) and the instruction counts of a copy, documented in docs/analyzer.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from ..hardware import GPUSpec
from .features import BASE_REGISTERS, KernelFeatures, is_shared

WAVEFRONT_BYTES = 128  # one shared-memory/L1 wavefront (32 banks x 4 bytes)
COPY_INSTRUCTIONS = 4  # per warp-level copy step: global load, shared store, two address ops
# One floor division or modulo by a constant that is not a power of two (multiply-high, shift,
# the floor correction of signed operands): what an im2col index costs per element.
DIVISION_INSTRUCTIONS = 6
LAUNCH_SECONDS = 3e-6
BARRIER_CYCLES = 20
SHARED_LATENCY_CYCLES = 30
MMA_LATENCY_CYCLES = 32
L1_LATENCY_CYCLES = 40  # load-to-use of an L1 hit (local memory included), Ampere/Hopper microbenchmarks
OVERLAP_NORM = 4  # units overlap imperfectly: their busy times combine as an L4 norm, not a max


def _overlapped(*cycles: float) -> float:
    """Busy time of units that run concurrently but not perfectly so.

    A warp stalled on one unit issues nothing to the others, so a unit that is not the bottleneck
    still costs a little: two equal loads take 2^(1/4) = 1.19x one, a load a third the size of the
    largest adds 0.3%. A plain max cannot tell apart kernels with the same bottleneck (a fifth of
    the measured H100 matmul records tie at the tensor-core bound), which leaves the ranking at
    the top, where the search looks, to chance.
    """
    return sum(c ** OVERLAP_NORM for c in cycles) ** (1.0 / OVERLAP_NORM)


@dataclasses.dataclass
class KernelEstimate:
    """The estimate of one kernel and the terms it came from (seconds unless noted)."""

    latency_s: float
    valid: bool
    reason: str
    blocks_per_sm: int
    waves: int
    wave_efficiency: float
    regs_per_thread: float
    smem_per_block: float
    trip_cycles: float
    tensor_cycles: float
    smem_cycles: float
    l2_cycles: float
    issue_cycles: float
    latency_cycles: float
    dram_s: float
    epilogue_s: float
    spill_factor: float


def _invalid(reason: str, features: KernelFeatures) -> KernelEstimate:
    return KernelEstimate(
        latency_s=math.inf, valid=False, reason=reason, blocks_per_sm=0, waves=0, wave_efficiency=0.0,
        regs_per_thread=features.regs_per_thread, smem_per_block=features.smem_per_block, trip_cycles=0.0,
        tensor_cycles=0.0, smem_cycles=0.0, l2_cycles=0.0, issue_cycles=0.0, latency_cycles=0.0, dram_s=0.0,
        epilogue_s=0.0, spill_factor=1.0,
    )


def check_limits(features: KernelFeatures, spec: GPUSpec, max_smem: Optional[int] = None) -> Optional[str]:
    """Why this kernel cannot launch on ``spec``, or None."""
    smem_limit = max_smem if max_smem is not None else spec.smem_per_block_bytes
    if features.threads_per_block > spec.max_threads_per_block:
        return f"{features.threads_per_block} threads per block > {spec.max_threads_per_block}"
    if features.smem_per_block > smem_limit:
        return f"{features.smem_per_block:.0f} B shared memory per block > {smem_limit} B"
    # nvcc fits registers under __launch_bounds__ by spilling; only a block whose threads cannot
    # get even the registers every thread needs (indices, pointers) cannot launch.
    threads = features.warps_per_block * spec.warp_size
    if threads * BASE_REGISTERS > spec.regs_per_block:
        return f"{threads} threads x {BASE_REGISTERS:.0f} base registers > {spec.regs_per_block} per block"
    return None


def register_cap(features: KernelFeatures, spec: GPUSpec) -> int:
    """Registers a thread may have: 255, or what ``__launch_bounds__`` leaves (regs_per_block / threads)."""
    return min(spec.max_regs_per_thread, spec.regs_per_block // (features.warps_per_block * spec.warp_size))


def as_built(features: KernelFeatures, spec: GPUSpec) -> KernelFeatures:
    """The kernel the builder ships: where its operand fragments are indexed by a loop's parity and
    both copies fit the thread's registers, the builder unrolls that loop (builder/parity_unroll.py)
    and the fragments stay in registers; otherwise they stay in local memory."""
    if not features.parity_unrolled_regs or features.parity_unrolled_regs > register_cap(features, spec):
        return features
    return dataclasses.replace(features, regs_per_thread=features.parity_unrolled_regs, local_operand_bytes=0.0,
                               parity_unrolled=True)


def uses_local_memory(features: KernelFeatures, spec: GPUSpec) -> bool:
    """Whether ptxas will put part of the kernel in local memory: registers over the cap, or operand
    fragments indexed at run time (``fragments_indexed_at_run_time`` in pipeline.py)."""
    return features.regs_per_thread > register_cap(features, spec) or features.local_operand_bytes > 0


def blocks_per_sm(features: KernelFeatures, spec: GPUSpec) -> int:
    """Resident blocks per SM under the thread, block, shared-memory and register limits."""
    threads = features.warps_per_block * spec.warp_size
    regs = min(features.regs_per_thread, register_cap(features, spec))
    limits = [spec.max_blocks_per_sm, spec.max_threads_per_sm // threads]
    if features.smem_per_block > 0:
        limits.append(int(spec.smem_per_sm_bytes // features.smem_per_block))
    limits.append(int(spec.regs_per_sm // max(1.0, regs * threads)))
    return max(0, min(limits))


def _pipelined_wait_share(features: KernelFeatures, trips: int) -> float:
    """Share of an L2 round trip and its two barriers a trip of a software-pipelined kernel waits for.

    With S copies of each operand tile the asynchronous copy of tile t + S - 1 is in flight while
    tile t is computed, so a copy has S - 1 tiles' compute to arrive in: a trip waits at most
    1 / (S - 1) of the round trip. The copies and their barriers run once per tile, which may span
    several trips of the fragment loop (its inner reduction loop). A synchronous fetch (a gathered
    swizzle, swizzle.py) stores to shared memory only when its loads are back, before the barrier
    ahead of the compute: its round trip is waited for whole, however many stages there are."""
    fetches = [c for c in features.copies if c.src_scope == "global" and is_shared(c.dst_scope)]
    tiles = min((c.outer_trips for c in fetches), default=trips)
    hidden_by = 1 if any(c.synchronous for c in fetches) else max(1, features.pipeline_stages - 1)
    return min(1.0, tiles / max(1, trips)) / hidden_by


def estimate_kernel(features: KernelFeatures, spec: GPUSpec, max_smem: Optional[int] = None) -> KernelEstimate:
    reason = check_limits(features, spec, max_smem)
    if reason is not None:
        return _invalid(reason, features)
    resident = blocks_per_sm(features, spec)
    if resident == 0:
        return _invalid("no block fits on an SM", features)
    clock = spec.clock_hz
    slots = spec.sm_count * resident
    waves = max(1, math.ceil(features.grid / slots))
    wave_efficiency = features.grid / (waves * slots)
    # Blocks an SM really holds at once: fewer than `resident` when the grid is small.
    active = min(resident, max(1, math.ceil(features.grid / spec.sm_count)))
    trips = max(1, features.main_loop_trips)
    spill = _spill(features, spec, resident)
    tensor, smem, l2, issue, copy_issue_per_warp = _trip_units(features, spec, active, trips, spill)
    copy_latency = _trip_latency(features, spec, trips, spill, copy_issue_per_warp)
    busy = active * _overlapped(tensor, smem, l2, issue)
    own_path = copy_latency + _overlapped(tensor, smem, l2)
    # Resident blocks hide each other's latency imperfectly too (barriers keep their warps in step).
    trip_cycles = _overlapped(busy, own_path)
    main_s = waves * trips * trip_cycles / clock
    dram_s = features.global_buffer_bytes / (spec.dram_gbps * 1e9)
    epilogue_s = _epilogue_seconds(features, spec, waves)
    latency = max(main_s, dram_s) + epilogue_s + LAUNCH_SECONDS
    return KernelEstimate(
        latency_s=latency, valid=True, reason="", blocks_per_sm=resident, waves=waves,
        wave_efficiency=wave_efficiency, regs_per_thread=features.regs_per_thread,
        smem_per_block=features.smem_per_block, trip_cycles=trip_cycles, tensor_cycles=tensor,
        smem_cycles=smem, l2_cycles=l2, issue_cycles=issue, latency_cycles=copy_latency, dram_s=dram_s,
        epilogue_s=epilogue_s, spill_factor=1.0 + spill.fraction,
    )


@dataclasses.dataclass
class _Spill:
    """Accumulator registers spilled to local memory: their share, the bytes moved around the MMAs,
    whether the spill stays in L1."""

    fraction: float
    bytes: float
    in_l1: bool


def _spill(features: KernelFeatures, spec: GPUSpec, resident: int) -> _Spill:
    """Register spills: nvcc caps registers at 255 per thread and at what __launch_bounds__ leaves
    (regs_per_block / threads); what does not fit lives in local memory and is loaded and stored
    around every MMA. The spill stays in L1 if it fits beside shared memory, else it goes to L2."""
    threads = features.warps_per_block * spec.warp_size
    reg_cap = register_cap(features, spec)
    acc_regs = features.acc_fragments_per_warp * features.mma_m * features.mma_n * features.acc_dtype_bytes / (
        spec.warp_size * 4
    )
    spill_regs = max(0.0, features.regs_per_thread - reg_cap)
    spilled_fraction = min(1.0, spill_regs / acc_regs) if acc_regs else 0.0
    if acc_regs > reg_cap + BASE_REGISTERS:
        # The accumulators alone overflow the cap: ptxas keeps none of the fragment array in
        # registers (ptxas on the H100 records: 32-168 registers and a 2-13 KB stack for them).
        spilled_fraction, spill_regs = 1.0, max(spill_regs, acc_regs)
    acc_tile_bytes = features.mma_m * features.mma_n * features.acc_dtype_bytes
    spill_bytes = features.mma_count * spilled_fraction * acc_tile_bytes * 2
    spill_footprint = spill_regs * 4 * threads * resident
    return _Spill(spilled_fraction, spill_bytes,
                  spill_footprint <= spec.l1_smem_bytes_per_sm - resident * features.smem_per_block)


def _trip_units(features: KernelFeatures, spec: GPUSpec, active: int, trips: int, spill: _Spill):
    """(tensor, shared, L2, issue) cycles per block and trip, each a unit the SM's blocks share, and
    one warp's copy instructions in one trip, issued back to back."""
    clock = spec.clock_hz
    block_trips = features.grid * trips
    acc = "float16" if features.acc_dtype_bytes == 2 else "float32"
    tensor_rate = spec.tensor_flops_per_cycle_per_sm(acc) * spec.mma_peak_share(features.mma_k)
    warps_active = active * features.warps_per_block
    sub_partitions = 4
    # Each warp stays on one SM sub-partition (its tensor core, issue slot and the queue that feeds
    # its shared-memory instructions to the SM's pipe): the busiest of the four sets the pace, so 6
    # warps run like 8 (two sub-partitions carry two warps each).
    sub_partition_balance = warps_active / (sub_partitions * math.ceil(warps_active / sub_partitions))
    tensor = features.mma_flops / block_trips / tensor_rate / sub_partition_balance
    cuda_rate = spec.fp32_tflops * 1e12 / (spec.sm_count * clock)
    tensor += features.cuda_core_flops / block_trips / cuda_rate

    smem_bytes = spill.bytes if spill.in_l1 else 0.0
    issue = 0.0
    l2_bytes = (0.0 if spill.in_l1 else spill.bytes) + features.direct_global_bytes
    copy_issue_per_warp = 0.0
    for copy in features.copies:
        if not is_shared(copy.dst_scope):
            continue
        # L1/shared pipe: one pass per 128-byte line the global side spans, plus the shared side's
        # bank-conflict wavefronts; L2 moves whole 32-byte sectors.
        smem_bytes += copy.warp_instructions * (
            copy.lines_per_request + copy.shared_wavefronts_per_request
        ) * WAVEFRONT_BYTES
        l2_bytes += copy.bytes_total / copy.sector_efficiency
        per_request = COPY_INSTRUCTIONS + DIVISION_INSTRUCTIONS * copy.address_divisions
        issue += copy.warp_instructions * per_request
        # A copy placed outside an inner serial loop (MetaSchedule's middle reduction tile) runs
        # once every `trips / outer_trips` trips: its instructions spread over them.
        copy_issue_per_warp += copy.serial_iters * min(1.0, copy.outer_trips / trips) * per_request
    fragment_bytes = features.smem_read_bytes - sum(
        c.bytes_total for c in features.copies if is_shared(c.src_scope)
    )
    smem_bytes += max(0.0, fragment_bytes)
    # Operand fragments in local memory go through L1 twice a trip: stored by ldmatrix, loaded by the MMAs.
    smem_bytes += 2 * features.local_operand_bytes * features.warps_per_block * block_trips
    smem = smem_bytes / block_trips / spec.smem_bytes_per_clock_per_sm / sub_partition_balance
    l2 = l2_bytes / block_trips / (spec.l2_gbps * 1e9 / spec.sm_count / clock)
    issue = issue / block_trips / sub_partitions / sub_partition_balance
    return tensor, smem, l2, issue, copy_issue_per_warp


def _trip_latency(features: KernelFeatures, spec: GPUSpec, trips: int, spill: _Spill,
                  copy_issue_per_warp: float) -> float:
    """Cycles a block's trip waits on its own path: one L2 round trip (the copy loop's loads are
    independent) plus issuing one warp's copy instructions, index arithmetic included, back to back.
    The round trip stays on every trip, also those that reuse a tile copied earlier: on the H100 the
    measured best tile with its k loop split under the copy ran 615-665 us against 474
    (tests/test_analysis_records.py)."""
    block_trips = features.grid * trips
    copy_latency = spec.l2_latency_cycles + 2 * BARRIER_CYCLES
    if features.pipeline_stages > 1:
        copy_latency *= _pipelined_wait_share(features, trips)
    copy_latency += copy_issue_per_warp
    # Each trip also waits on a shared-memory load and its chain of dependent MMAs (the k-steps that
    # accumulate into the same fragment).
    mma_per_warp_trip = features.mma_count / (block_trips * features.warps_per_block)
    chain = mma_per_warp_trip / max(1.0, features.acc_fragments_per_warp)
    copy_latency += SHARED_LATENCY_CYCLES + chain * MMA_LATENCY_CYCLES
    # A spilled accumulator is reloaded before its MMA can issue: each such MMA of a warp's trip
    # waits one local-memory load (an L1 hit if the spill fits there, else L2).
    spill_latency = L1_LATENCY_CYCLES if spill.in_l1 else spec.l2_latency_cycles
    copy_latency += mma_per_warp_trip * spill.fraction * spill_latency
    if features.local_operand_bytes:
        copy_latency += L1_LATENCY_CYCLES  # the trip's first MMA waits its operands' local load
    return copy_latency


def _epilogue_seconds(features: KernelFeatures, spec: GPUSpec, waves: int) -> float:
    """The write-back after the main loop. An output address that keeps im2col divisions
    (index_cost.lowered_flat_address) computes them for every element it stores; nothing is left
    to hide their dependent chains behind, so they are charged whole per SM, not spread over its
    four sub-partitions as the main loop's copies are (docs/analyzer.md)."""
    clock = spec.clock_hz
    write_backs = [c for c in features.copies if not is_shared(c.dst_scope)]
    epilogue_bytes = sum(c.bytes_total for c in write_backs)
    epilogue_issue = sum(c.warp_instructions * DIVISION_INSTRUCTIONS * c.address_divisions
                         for c in write_backs) / spec.sm_count
    return (epilogue_bytes / (spec.dram_gbps * 1e9) + waves * spec.l2_latency_cycles / clock
            + epilogue_issue / clock)
