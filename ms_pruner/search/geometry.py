"""Spreading a cold round's batch over kernel geometries (``analysis.kernel_geometry``).

In a cold round the analyzer alone ranks what is measured. Schedules of one geometry differ only
in what the analyzer barely tells apart (operand fetch width, unroll depth, write-back width, the
order of loops inside a thread), so its favourite geometry's variants can fill a whole batch: one
misjudged geometry would then cost the round.
"""

from __future__ import annotations

from typing import Callable, List


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
