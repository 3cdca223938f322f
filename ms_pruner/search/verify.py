"""Verify: rank the draft and Droplet's neighbours with the tuning cost model, compose the batch.

``compose_batch`` is pure list logic (no TVM): the schedules are opaque, ``key_of`` gives each
one's structural hash, so the rules can be checked on plain strings.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Set

from ..database.records import measure_candidate


@dataclasses.dataclass
class BatchRules:
    """How a batch of ``size`` is split: ``droplet_share`` of it from the ranked neighbours,
    ``eps_greedy`` of the rest drawn at random from the draft, the remainder the draft's best.
    ``order`` (the first-round policy's, in a cold batch) reorders and caps the ranked draft before
    its best are taken: first_round.FirstRoundPolicy.batch_order."""

    size: int
    droplet_share: float
    eps_greedy: float
    order: Optional[Callable[[List], List]] = None


def rank(cost_model, context, schedules: List) -> List:
    """``schedules`` best first by ``cost_model`` (as given when there is none)."""
    if not schedules or cost_model is None:
        return list(schedules)
    scores = cost_model.predict(context, [measure_candidate(s) for s in schedules])
    order = sorted(range(len(schedules)), key=lambda i: -float(scores[i]))
    return [schedules[i] for i in order]


def compose_batch(ranked_droplet: List, draft: List, ranked_draft: List, rules: BatchRules, key_of: Callable,
                  excluded: Set, rng, repeats: Optional[Callable] = None):
    """(picks, the draft's unpicked members in rank order).

    Neighbours come first, then the draft's best (``ranked_draft``, in ``rules.order`` where
    given), then the random share drawn from ``draft``; a stage that comes up short is topped up
    from the ranked draft. Nothing in ``excluded`` (measured keys) or picked twice is taken, nor a
    schedule for which ``repeats`` (asked once per schedule, in pick order:
    same_kernel.SameKernels.repeats) is true.
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
    if rules.order is not None:
        ranked_draft = rules.order(ranked_draft)
    take(ranked_draft, n_best)
    rest = [s for s in draft if key_of(s) not in seen]
    rng.shuffle(rest)
    take(rest, n_random)
    take(ranked_draft, size - len(picks))
    return picks, [s for s in ranked_draft if key_of(s) not in seen]
