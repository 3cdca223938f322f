"""Composing one measured batch from ranked neighbours and a ranked draft.

Pure list logic (no TVM): the schedules are opaque, ``key_of`` gives each one's structural hash
and ``group`` its kernel geometry, so the rules can be checked on plain strings.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Hashable, List, Optional, Set

from .geometry import capped_per_group


@dataclasses.dataclass
class BatchRules:
    """How a batch of ``size`` is split: ``droplet_share`` of it from the ranked neighbours,
    ``eps_greedy`` of the rest drawn at random from the draft, the remainder the draft's best.
    ``geometry_cap`` (cold batches) bounds the draft's best-ranked picks per ``group``, counting
    ``prior_counts`` (picks of the same split batch measured already) as taken."""

    size: int
    droplet_share: float
    eps_greedy: float
    geometry_cap: Optional[int] = None
    prior_counts: Optional[Dict[Hashable, int]] = None


def compose_batch(ranked_droplet: List, draft: List, ranked_draft: List, rules: BatchRules, key_of: Callable,
                  excluded: Set, rng, group: Optional[Callable] = None, spread: Optional[Callable] = None,
                  repeats: Optional[Callable] = None):
    """(picks, the draft's unpicked members in rank order).

    Neighbours come first, then the draft's best (``ranked_draft``, geometry-capped when the rules
    say so, after ``spread`` reorders it: geometry.spread_variants), then the random share drawn
    from ``draft``; a stage that comes up short is topped up from the ranked draft. Nothing in
    ``excluded`` (measured keys) or picked twice is taken, nor a schedule for which ``repeats`` (asked
    once per schedule, in pick order: same_kernel.SameKernels.repeats) is true.
    """
    size = rules.size
    n_droplet = min(len(ranked_droplet), int(round(size * rules.droplet_share))) if ranked_droplet else 0
    n_random = int(round((size - n_droplet) * rules.eps_greedy))
    n_best = size - n_droplet - n_random
    picks, seen = [], set()

    def take(schedules, count):
        for sch in schedules:
            if count <= 0 or len(picks) >= size:
                break
            key = key_of(sch)
            if key in seen or key in excluded:
                continue
            seen.add(key)
            if repeats is not None and repeats(sch):
                continue
            picks.append(sch)
            count -= 1

    take(ranked_droplet, n_droplet)
    if rules.geometry_cap is not None:
        if spread is not None:
            ranked_draft = spread(ranked_draft)
        ranked_draft = capped_per_group(ranked_draft, rules.geometry_cap, group, size, rules.prior_counts)
    take(ranked_draft, n_best)
    rest = [s for s in draft if key_of(s) not in seen]
    rng.shuffle(rest)
    take(rest, n_random)
    take(ranked_draft, size - len(picks))
    return picks, [s for s in ranked_draft if key_of(s) not in seen]


def with_family_floor(picks: List, ranked_rest: List, family: Callable, floor: int,
                      order: Optional[Callable] = None):
    """(picks, ranked_rest) with at least ``floor`` picks of every family that ``picks`` or
    ``ranked_rest`` hold (as far as it has members): the lowest-ranked picks of the families above
    their floor give way to the best-ranked unpicked members of those below it (in ``order`` of
    them where given: e.g. one a geometry first), same batch size.

    A cold batch of a space with two rule families is ranked by the analyzer alone, whose model of
    one family may be off by a constant the other's is not; measuring each family from the start
    lets the verify model and the Droplet rounds find which is faster."""
    counts: Dict[Hashable, int] = {}
    for sch in picks:
        counts[family(sch)] = counts.get(family(sch), 0) + 1
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
