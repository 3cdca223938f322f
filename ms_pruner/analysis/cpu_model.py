"""A roofline for ``llvm`` schedules, so the draft-then-verify loop also runs on CPU machines.

Compute time is the program's float work over the cores its parallel loops keep busy, at the SIMD
width its vectorized loops use. Memory time is each block's global traffic over cache bandwidth,
with every global buffer read once from DRAM. Sane, not precise: it orders parallel+vectorized
schedules ahead of serial scalar ones and charges small-trip inner loops for their overhead.
"""

from __future__ import annotations

import dataclasses
import math

from ..hardware import CPUSpec
from .tir_walk import ProgramInfo

LOOP_OVERHEAD_CYCLES = 1.0  # per iteration of a non-vectorized innermost loop


@dataclasses.dataclass
class CPUEstimate:
    latency_s: float
    compute_s: float
    cache_s: float
    dram_s: float
    overhead_s: float
    parallel_extent: int
    vector_lanes: int


def estimate_cpu(program: ProgramInfo, cpu: CPUSpec) -> CPUEstimate:
    lanes_per_vector = max(1, cpu.simd_bytes // 4)
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
        traffic = sum(a.elements * a.dtype_bytes for a in block.reads + block.writes) * block.executions
        cache += traffic / (cpu.cache_gbps() * 1e9 / cpu.physical_cores * cores * balance)
        innermost = block.loops[-1] if block.loops else None
        if innermost is not None and innermost.kind not in ("vectorized", "unrolled"):
            iterations = block.executions / max(1, block.vector_lanes)
            overhead += iterations * LOOP_OVERHEAD_CYCLES / (cpu.clock_ghz * 1e9 * cores)
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
