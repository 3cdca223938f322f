"""Spreading a cold round's batch over kernel geometries (``analysis.kernel_geometry``).

In a cold round the analyzer alone ranks what is measured. Schedules of one geometry differ only
in what the analyzer barely tells apart (operand fetch width, unroll depth, write-back width, the
order of loops inside a thread), so its favourite geometry's variants can fill a whole batch: one
misjudged geometry would then cost the round.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Optional


def capped_per_group(ranked: List, cap: int, group: Callable, wanted: int,
                     taken: Optional[Dict[Hashable, int]] = None) -> List:
    """``ranked`` with each group's members past its ``cap`` best moved behind all others (rank
    order kept in both parts). ``group`` is called only until ``wanted`` members are within their
    caps, since only the head of the list is picked. ``taken`` counts members of each group picked
    before (the first part of a batch measured in two parts) against its cap."""
    within, over, counts = [], [], dict(taken or {})
    for index, item in enumerate(ranked):
        if len(within) >= wanted:
            return within + over + ranked[index:]
        key = group(item)
        counts[key] = counts.get(key, 0) + 1
        (within if counts[key] <= cap else over).append(item)
    return within + over
