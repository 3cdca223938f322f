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
    as ties come in turn. ``variant`` gives a member's tuple of factors (e.g. fetch widths, fragment
    arrangement); among the members estimated within ``band`` (a fraction) of the group's best
    estimate, each next one is the best-ranked whose factor values the members placed before it
    share least (summed over the factors), so every value of each factor comes up before any comes
    up twice, as far as the members allow. Members outside the band follow in rank order. Every group
    keeps the positions it held, so the order of groups, and what a per-group cap does with it, is as before.

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
    tied: Dict[Hashable, List[int]] = {}
    behind: Dict[Hashable, List[int]] = {}
    for position, (key, _, estimate) in enumerate(keys):
        positions.setdefault(key, []).append(position)
        (tied if estimate <= best[key] * (1.0 + band) else behind).setdefault(key, []).append(position)
    spread = list(ranked)
    for key, slots in positions.items():
        order = _balanced([keys[p][1] for p in tied.get(key, [])], tied.get(key, [])) + behind.get(key, [])
        for slot, position in zip(slots, order):
            spread[slot] = ranked[position]
    return spread


def _balanced(factors: List[tuple], positions: List[int]) -> List[int]:
    """``positions`` reordered greedily: each next the earliest whose factor values are least used so far."""
    counts: List[Dict[Hashable, int]] = [dict() for _ in (factors[0] if factors else ())]
    left, order = list(range(len(positions))), []
    while left:
        chosen = min(left, key=lambda i: (sum(c.get(v, 0) for c, v in zip(counts, factors[i])), i))
        left.remove(chosen)
        order.append(positions[chosen])
        for c, v in zip(counts, factors[chosen]):
            c[v] = c.get(v, 0) + 1
    return order
