"""The rule-family floor of a cold batch: each tensor-core rule family of the space measured from the start.

A cold batch of a space with two rule families (WMMA, mma: ms_pruner.space) is ranked by the
analyzer alone, whose model of one family may be off by a constant the other's is not; measuring
each family from the start lets the verify model and the Droplet rounds find which is faster.
"""

from __future__ import annotations

import collections
from typing import Callable, List, Optional

from ...space import sketch_family


def family_lookup(schedules: List) -> Callable:
    """The rule family (space.sketch_family) of each of ``schedules``, read once a schedule."""
    families = {id(s): sketch_family(s.trace) for s in schedules}
    return lambda sch: families[id(sch)]


def with_family_floor(picks: List, ranked_rest: List, family: Callable, floor: int,
                      order: Optional[Callable] = None):
    """(picks, ranked_rest) with at least ``floor`` picks of every family that ``picks`` or
    ``ranked_rest`` hold (as far as it has members): the lowest-ranked picks of the families above
    their floor give way to the best-ranked unpicked members of those below it (in ``order`` of
    them where given: e.g. one a geometry first), same batch size."""
    counts = collections.Counter(map(family, picks))
    for sch in ranked_rest:
        counts.setdefault(family(sch), 0)
    picks, rest = list(picks), list(ranked_rest)
    for short in [f for f, n in counts.items() if n < floor]:
        members = [s for s in rest if family(s) == short]
        for member in (order(members) if order is not None else members)[:floor - counts[short]]:
            donors = [i for i, s in enumerate(picks) if counts[family(s)] > floor]
            if not donors:
                break
            given = picks.pop(donors[-1])
            counts[family(given)] -= 1
            picks.append(member)
            counts[short] += 1
            rest.remove(member)
            rest.insert(0, given)
    return picks, rest


def with_population_families(draft: List, population: List, family: Callable, floor: int,
                             latency: Callable, key: Callable, excluded: set) -> List:
    """``draft`` with, for each family of ``population`` that holds fewer than ``floor`` of the
    draft's members, that family's ``floor`` best-estimated unmeasured members of the population.
    The evolution that makes the draft selects on the analyzer alone, so a family it estimates
    well below the other leaves the draft whole (an fp16 ``matmul_nt`` for the H100: a default cold
    round picked 32 WMMA kernels and no mma one, ``cpu/space/suite_h100.json.gz`` ``cold_rounds``),
    and the floor and the climbs, which work on the draft, would have none of it to measure."""
    counts = collections.Counter(map(family, draft))
    held = {key(s) for s in draft} | set(excluded)
    added: List = []
    for short in sorted({family(s) for s in population if counts[family(s)] < floor}, key=str):
        members = {key(s): s for s in population if family(s) == short and key(s) not in held}
        added += sorted(members.values(), key=latency)[:floor - counts[short]]
    return draft + added
