"""The shared memory a block allocates once TVM has lowered it: its operand tiles (each stage's copies,
sized in features.py from the pipeline annotations), the staging of TVM's auto copy of accumulators
to global, and how MergeSharedMemoryAllocations lets the staging reuse the operand tiles' space.

Predicted from the schedule alone, so VerifyGPUCode's limit and the analyzer's occupancy hold before a
candidate is built; ``ms-pruner space --build`` compares it with the compiled kernel's allocation.
"""

from __future__ import annotations

from typing import Dict

AUTO_COPY_ROWS = 8  # rows of a warp's accumulator tile TVM's auto copy stages at a time


MERGE_MATCH_RANGE = 16  # TVM's MergeSharedMemoryAllocations reuses a freed buffer within this size ratio


def merged_shared_bytes(operand_tiles: Dict[str, float], staging_tiles: Dict[str, float]) -> float:
    """Shared bytes a block allocates once TVM has merged its buffers (MergeSharedMemoryAllocations):
    the output staging lives after the main loop's operand tiles, so it takes the place of a freed
    one at least as large and at most ``MERGE_MATCH_RANGE`` times larger; failing that, of the
    largest smaller ones, as many as it takes to hold it; failing that, it is allocated beside them.
    Checked on pipelined mma kernels (docs/space.md)."""
    operands, staging = sum(operand_tiles.values()), sum(staging_tiles.values())
    if not operands or not staging:
        return max(operands, staging)
    if any(staging <= size <= MERGE_MATCH_RANGE * staging for size in operand_tiles.values()):
        return operands
    taken = 0.0
    for size in sorted((s for s in operand_tiles.values() if s < staging), reverse=True):
        taken += size
        if taken >= staging:
            break
    return operands - taken + max(staging, taken)


def block_shared_bytes(operand_tiles: Dict[str, float], staging_tiles: Dict[str, float], pipelined: bool) -> float:
    """A pipelined kernel's allocation as TVM merges it; any other keeps the larger of its two sums,
    the measure the screen's limits were fitted with on WMMA kernels."""
    if pipelined:
        return merged_shared_bytes(operand_tiles, staging_tiles)
    return max(sum(operand_tiles.values()), sum(staging_tiles.values()))


def auto_copy_staging(src, dst, warps: int) -> float:
    """Shared bytes TVM's auto copy of accumulators to global (the mma rule's epilogue) allocates: each
    warp stages ``AUTO_COPY_ROWS`` rows of its tile at a time (read from the lowered kernels of
    sampled 4096^3 matmul candidates; checked by ``ms-pruner space --build``, docs/space.md)."""
    row = dst.shape[-1] if dst.shape else 1
    return float(warps * AUTO_COPY_ROWS * row * src.dtype_bytes)
