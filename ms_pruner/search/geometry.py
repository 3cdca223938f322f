"""Which draft members are the same kernel to the analyzer, so a cold round can spread its batch.

In a cold round the analyzer alone ranks what is measured. Schedules with the same block and warp
tiles and main-loop depth differ only in what the analyzer barely tells apart (operand fetch
width, unroll depth, write-back width, the order of loops inside a thread), so its favourite
geometry's variants can fill a whole batch: one misjudged geometry would then cost the round.
"""

from __future__ import annotations

from typing import Callable, Hashable, List

from ..analysis.features import is_shared


def kernel_geometry(estimate) -> Hashable:
    """Grid, threads, accumulator fragments per warp, main-loop trips and the bytes each operand
    tile brings to shared memory per trip, of every kernel; None without GPU features."""
    if not estimate.features:
        return None
    key = []
    for f in estimate.features:
        block_trips = max(1, f.grid) * max(1, f.main_loop_trips)
        tiles = tuple(round(c.bytes_total / block_trips) for c in f.copies
                      if c.src_scope == "global" and is_shared(c.dst_scope))
        key.append((f.grid, f.threads_per_block, f.acc_fragments_per_warp, f.main_loop_trips, tiles))
    return tuple(key)


def capped_per_group(ranked: List, cap: int, group: Callable, wanted: int) -> List:
    """``ranked`` with each group's members past its ``cap`` best moved behind all others (rank
    order kept in both parts). ``group`` is called only until ``wanted`` members are within their
    caps, since only the head of the list is picked."""
    within, over, counts = [], [], {}
    for index, item in enumerate(ranked):
        if len(within) >= wanted:
            return within + over + ranked[index:]
        key = group(item)
        counts[key] = counts.get(key, 0) + 1
        (within if counts[key] <= cap else over).append(item)
    return within + over
