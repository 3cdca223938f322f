"""A roofline with reuse for ``llvm`` schedules, so the draft-then-verify loop also runs on CPU machines.

Compute time is the program's float work over the cores its parallel loops keep busy, at the SIMD
width its vectorized loops use. Memory time is what each level of the hierarchy must deliver:
for registers, L1 and L2 in turn, an access is fetched again on every iteration of a loop it
does not depend on unless what it touched inside that loop still fits in its share of the level
(``_fetched``). That is what separates a tile that keeps its accumulators in registers across
the reduction loop from one that reloads them every step, which a traffic count without reuse
cannot see (every tiling of a matmul would move the same bytes). Sane, not precise: it orders
schedules, it does not predict absolute time.
"""

from __future__ import annotations

import dataclasses
import math

from ..hardware import CPUSpec
from .tir_walk import Access, BlockInfo, ProgramInfo

LOOP_OVERHEAD_CYCLES = 1.0  # per iteration of a non-vectorized innermost loop
VECTOR_REGISTERS = {64: 32, 32: 16, 16: 16}  # architectural SIMD registers by width (AVX-512, AVX2, SSE/NEON)
LOADS_PER_CYCLE = 2.0  # L1 load ports per core; a store counts as two loads (one store port)
LINE_BYTES = 64
L2_BYTES_PER_CYCLE = 64.0  # L2 -> L1 fill bandwidth per core
L3_BYTES_PER_CYCLE = 16.0  # L3/memory -> L2 per core


@dataclasses.dataclass
class CPUEstimate:
    latency_s: float
    compute_s: float
    cache_s: float  # the slowest of the register-load, L1-fill and L2-fill times
    dram_s: float
    overhead_s: float
    parallel_extent: int
    vector_lanes: int


def _fetched(block: BlockInfo, access: Access, capacity_elems: float) -> float:
    """Elements of ``access`` the level above must fetch over the launch, holding ``capacity_elems``.

    Walking out from the innermost loop, the footprint grows with every loop the access moves
    with; a loop it does not move with reuses the footprint when that still fits, else refetches.
    Accesses without strides (walk without ``strides=True``) move with every loop: no reuse.
    """
    strides = access.strides or (1,) * len(block.loops)
    footprint = float(access.elements)
    reuse = 1.0
    for loop, stride in zip(reversed(block.loops), reversed(strides)):
        if loop.extent <= 1 or loop.thread is not None:
            continue
        if stride != 0:
            footprint *= loop.extent
        elif footprint <= capacity_elems:
            reuse *= loop.extent
    return block.executions * access.elements / reuse


def _contiguous_run(block: BlockInfo, access: Access, limit: int) -> int:
    """Elements of ``access`` one unit-stride loop walks through in a row (up to ``limit``)."""
    strides = access.strides or (1,) * len(block.loops)
    runs = [loop.extent for loop, stride in zip(block.loops, strides) if stride == 1 and loop.extent > 1]
    return max(1, min(limit, max(runs) if runs else 1))


def _block_memory_cycles(block: BlockInfo, cpu: CPUSpec, lanes_per_vector: int):
    """(load-port cycles, L2->L1 line cycles, L3->L2 line cycles) of one block, summed over cores."""
    accesses = [(a, 1.0) for a in block.reads] + [(a, 2.0) for a in block.writes]
    if not accesses:
        return 0.0, 0.0, 0.0
    share = 1.0 / len(accesses)
    vector_loop = next((i for i in range(len(block.loops) - 1, -1, -1) if block.loops[i].kind == "vectorized"), None)
    loads = l1_fill = l2_fill = 0.0
    for access, weight in accesses:
        elem = max(1.0, access.dtype_bytes)
        registers = VECTOR_REGISTERS.get(cpu.simd_bytes, 16) * cpu.simd_bytes / elem * share
        per_instruction = 1
        if vector_loop is not None and access.strides and access.strides[vector_loop] == 1:
            per_instruction = min(block.loops[vector_loop].extent, lanes_per_vector)
        loads += weight * _fetched(block, access, registers) / per_instruction
        line_elems = max(1, int(LINE_BYTES // elem))
        run = _contiguous_run(block, access, line_elems)
        l1_fill += _fetched(block, access, cpu.l1d_bytes / elem * share) / run * LINE_BYTES / L2_BYTES_PER_CYCLE
        l2_fill += _fetched(block, access, cpu.l2_bytes / elem * share) / run * LINE_BYTES / L3_BYTES_PER_CYCLE
    return loads / LOADS_PER_CYCLE, l1_fill, l2_fill


def estimate_cpu(program: ProgramInfo, cpu: CPUSpec) -> CPUEstimate:
    lanes_per_vector = max(1, cpu.simd_bytes // 4)
    clock = cpu.clock_ghz * 1e9
    compute = cache = overhead = 0.0
    parallel_max = 1
    lanes_max = 1
    for block in program.blocks:
        parallel = 1
        for loop in block.loops:
            if loop.kind == "parallel":
                parallel *= loop.extent
        parallel_max = max(parallel_max, parallel)
        cores = min(cpu.physical_cores, parallel)
        balance = parallel / (math.ceil(parallel / cores) * cores) if parallel > 1 else 1.0
        lanes = min(block.vector_lanes, lanes_per_vector)
        lanes_max = max(lanes_max, lanes)
        core_rate = cpu.fp32_gflops() * 1e9 / cpu.physical_cores
        scalar_rate = core_rate / lanes_per_vector
        work = block.executions * max(block.float_ops, 0)
        compute += work / (scalar_rate * lanes * cores * balance)
        cache += max(_block_memory_cycles(block, cpu, lanes_per_vector)) / (clock * cores * balance)
        innermost = block.loops[-1] if block.loops else None
        if innermost is not None and innermost.kind not in ("vectorized", "unrolled"):
            iterations = block.executions / max(1, block.vector_lanes)
            overhead += iterations * LOOP_OVERHEAD_CYCLES / (clock * cores)
    dram_bytes = 0.0
    for shape, elem in program.params.values():
        size = elem
        for dim in shape:
            size *= dim
        dram_bytes += size
    dram = dram_bytes / (cpu.dram_gbps * 1e9)
    latency = max(compute, cache, dram) + overhead + 1e-6
    return CPUEstimate(
        latency_s=latency, compute_s=compute, cache_s=cache, dram_s=dram, overhead_s=overhead,
        parallel_extent=parallel_max, vector_lanes=lanes_max,
    )
