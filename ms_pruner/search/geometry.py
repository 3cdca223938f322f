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


def spread_variants(ranked: List, group: Callable, variant: Callable, latency: Callable, band: float) -> List:
    """``ranked`` with each group's members reordered so that its variants the analyzer estimates
    as ties come in turn: the best-ranked member of each variant estimated within ``band`` (a
    fraction) of the group's best estimate, then the second of each, and so on; members outside the
    band follow in rank order. Every group keeps the positions it held, so the order of groups, and
    what a per-group cap does with it, is as before.

    Why: within one kernel geometry the analyzer separates operand fetch widths by under 1%, and on
    the H100 records the variant it put first (16/16-byte fetches) was not the fastest in either
    measured best geometry (docs/search.md); a cold batch that takes a geometry's few capped picks
    from one variant measures one bet where it could measure the ties.
    """
    keys = [(group(item), variant(item), latency(item)) for item in ranked]
    best: Dict[Hashable, float] = {}
    for key, _, estimate in keys:
        best[key] = min(best.get(key, estimate), estimate)
    positions: Dict[Hashable, List[int]] = {}
    members: Dict[Hashable, list] = {}
    seen: Dict[Hashable, int] = {}
    for position, (item, (key, kind, estimate)) in enumerate(zip(ranked, keys)):
        if estimate <= best[key] * (1.0 + band):
            turn = seen.get((key, kind), 0)
            seen[(key, kind)] = turn + 1
        else:
            turn = len(ranked)
        positions.setdefault(key, []).append(position)
        members.setdefault(key, []).append((turn, position, item))
    spread = list(ranked)
    for key, slots in positions.items():
        for slot, (_, _, item) in zip(slots, sorted(members[key], key=lambda member: member[:2])):
            spread[slot] = item
    return spread
