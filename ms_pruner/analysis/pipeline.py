"""How a software-pipelined kernel keeps its operands: the copies of each shared tile
InjectSoftwarePipeline keeps in flight, and whether its fragment copies are chosen at run time.

Read from the pipeline annotations (``software_pipeline_stage``) on the loops around the fragment
loads, before lowering, so the analyzer sizes shared memory and registers of the mma rule's
kernels from the schedule alone.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

from ..errors import UserError
from .tir_walk import FRAGMENT_LOADS, BlockInfo

# The mma rule's pipelined reduction loop holds five statements: the two global->shared copies, then
# the inner (fragment) pipeline's prologue, body and epilogue once InjectSoftwarePipeline has
# expanded it. The prologue and, where the inner loop runs more than one trip, the body read the
# shared tiles.
PIPELINE_STATEMENTS = 5
PROLOGUE, BODY = 2, 3

# nvcc unrolls a pipelined k loop of a few trips whole: straight-line code, in which ptxas moves each
# stage's fragment loads next to the MMAs that read them, so no second fragment copy stays live and
# no copy is chosen at run time. Of the sampled H100 mma kernels of matmul:256x256x128 and
# matmul_nt:1024x1024x64, 18 of 23 of at most 8 trips hold an HMMA for every MMA of every trip (the
# other 5 keep a stack, 4 of them their accumulators); with the suite's built ones and the 4096^3
# GEMM's for H100 and A100, 3 of 17 of 9-18 trips and none of the 144 of more
# (docs/results/cpu/space/suite_h100.json.gz, ``unrolled_pipelines``). "0" turns the term off.
UNROLLED_TRIPS_ENV = "MS_PRUNER_ANALYZER_UNROLLED_TRIPS"
UNROLLED_TRIPS = 8


def unrolled_whole(main_loop_trips: int) -> bool:
    """Whether the analyzer takes a pipelined k loop of ``main_loop_trips`` as unrolled whole."""
    limit = os.environ.get(UNROLLED_TRIPS_ENV, str(UNROLLED_TRIPS))
    if not limit.isdigit():
        raise UserError(f"{UNROLLED_TRIPS_ENV} must be a whole number of trips (0: off), got {limit!r}")
    return main_loop_trips <= int(limit)


def _fragment_pipeline(blocks: Sequence[BlockInfo]) -> Tuple[Optional[List[int]], int]:
    """(stages of the pipelined loop around the fragment loads, trips of the inner fragment loop);
    (None, 1) without a pipeline."""
    for block in blocks:
        if not any(name in FRAGMENT_LOADS for name in block.intrinsics):
            continue
        loops = block.loops[:block.own_start] if block.own_start else block.loops
        outer = next((i for i, loop in enumerate(loops) if loop.stages), None)
        if outer is None:
            continue
        inner = next((loop for loop in loops[outer + 1:] if loop.stages), None)
        return loops[outer].stages, inner.extent if inner is not None else 1
    return None, 1


def pipeline_shape(blocks: Sequence[BlockInfo]) -> Tuple[int, int]:
    """(copies of each shared operand tile, trips of the inner fragment loop) of a software-pipelined
    kernel; (1, 1) without a pipeline. TVM's InjectSoftwarePipeline keeps a tile's copies up to the
    stage of the last statement that reads it minus the copies' stage (0), plus one; a pipeline of
    another shape than the mma rule's keeps at most its stage span plus one."""
    stages, trips = _fragment_pipeline(blocks)
    if stages is None:
        return 1, 1
    if len(stages) != PIPELINE_STATEMENTS:
        return max(stages) - min(stages) + 1, trips
    last_reader = stages[BODY] if trips > 1 else stages[PROLOGUE]
    return last_reader - min(stages[:PROLOGUE]) + 1, trips


def fragments_indexed_at_run_time(blocks: Sequence[BlockInfo]) -> bool:
    """Whether the operand fragments alternate between two copies by the parity of the outer k loop:
    the fragment loop runs once and the pipeline loads fragments a stage before the MMAs use them
    (depth 3 and more). The copy is then chosen at run time, and ptxas keeps arrays indexed at run
    time in local memory (the stacks of such mma kernels, docs/analyzer.md); a fragment loop of more
    trips picks the copy by its own, unrolled, index."""
    stages, trips = _fragment_pipeline(blocks)
    return (stages is not None and len(stages) == PIPELINE_STATEMENTS and trips == 1
            and stages[PROLOGUE] < stages[BODY])
