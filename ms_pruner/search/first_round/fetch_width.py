"""Widening the operand fetches of a cold round's picks.

The geometry cap (geometry.py) gives part of a cold batch to geometries the draft explored less,
whose members keep the fetch widths MetaSchedule's sampler drew: three in four fetch an operand
in 4 bytes or less per thread, which the H100 database measured 7-84% slower on its best tiling,
where the analyzer sees a few percent. So before such a pick is measured, its cooperative-fetch
decisions are set to their widest candidates (one replay, ~40 ms on a tensor-core matmul) and the
widened schedule is measured instead, if it is valid and the analyzer estimates it no slower.
"""

from __future__ import annotations

import itertools
from typing import List, Optional, Tuple

from ...analysis import has_narrow_fetch
from ..droplet import (COOPERATIVE_FETCH, cooperative_fetch_decisions, decisions_but_operand_fetches,
                       operand_fetch_decisions)

# The trace-decision helpers live with the others in droplet.py; the climb and tests name them here.
__all__ = ["COOPERATIVE_FETCH", "cooperative_fetch_decisions", "decisions_but_operand_fetches",
           "operand_fetch_decisions", "wide_fetch_variant_traces", "with_wide_fetch_variants",
           "widest_fetch_variant", "widen_narrow_picks"]


def wide_fetch_variant_traces(trace, widest: int = 2) -> List:
    """``trace`` with its operand fetches at every combination of their ``widest`` widest vector
    lengths but its own, postprocessors removed: replayed (``DesignSpace.replay_valid``, all of a
    round's at once, on the context's threads), the valid ones are the wide fetch-width variants.

    These are the variants of one tiling that the analyzer estimates within about 1% of each other
    and the H100 measured a few percent apart in either direction (docs/search.md): a cold batch
    takes them in turn (geometry.spread_variants), which it can only do if the draft holds them.
    """
    base = trace.simplified(remove_postproc=True)
    decisions = operand_fetch_decisions(base)
    own = tuple(int(base.decisions[inst]) for inst in decisions)
    choices = [range(len(inst.attrs[0]) - 1, max(-1, len(inst.attrs[0]) - 1 - widest), -1) for inst in decisions]
    traces = []
    for combination in itertools.product(*choices):
        if combination == own:
            continue
        variant = base
        for inst, index, current in zip(decisions, combination, own):
            if index != current:
                variant = variant.with_decision(inst, index, remove_postproc=True)
        traces.append(variant)
    return traces


def with_wide_fetch_variants(traces: List) -> List:
    """Each of ``traces`` followed by its wide fetch-width variants (``wide_fetch_variant_traces``)."""
    return [variant for trace in traces for variant in [trace] + wide_fetch_variant_traces(trace)]


def widest_fetch_variant(space, trace, seed: int) -> Optional[object]:
    """``trace`` replayed with every cooperative fetch at its widest vector length, or, when that
    does not pass the postprocessors, one candidate narrower at a time (never narrower than the
    trace's own draw); None when no wider variant is valid or there is nothing to widen."""
    base = trace.simplified(remove_postproc=True)
    decisions = cooperative_fetch_decisions(base)
    current = {inst: int(base.decisions[inst]) for inst in decisions}
    longest = max((len(inst.attrs[0]) for inst in decisions), default=0)
    for step in range(longest):
        widened = base
        changed = False
        for inst in decisions:
            index = max(current[inst], len(inst.attrs[0]) - 1 - step)
            if index != current[inst]:
                widened = widened.with_decision(inst, index, remove_postproc=True)
                changed = True
        if not changed:
            return None
        sch = space.replay(widened, seed=seed)
        if sch is not None:
            return sch
    return None


def widen_narrow_picks(picks: List, space, estimate, key_of, measured: set, rng,
                       kept: frozenset = frozenset()) -> Tuple[List, int]:
    """(``picks`` with each one that fetches an operand narrowly replaced by its widest-fetch
    variant where that is valid, new, and estimated no slower; how many were replaced).

    ``estimate(sch)`` is the analyzer's estimate, ``key_of(sch)`` the structural hash that
    ``measured`` holds for what was measured before; picks whose hash is in ``kept`` stay as they are.
    """
    keys = {key_of(sch) for sch in picks}
    out, widened = [], 0
    for sch in picks:
        current = estimate(sch)
        wide = None
        if key_of(sch) not in kept and has_narrow_fetch(current.features):
            wide = widest_fetch_variant(space, sch.trace, seed=rng.randrange(1, 1 << 30))
        key = key_of(wide) if wide is not None else None
        if wide is None or key in keys or key in measured or estimate(wide).latency_s > current.latency_s:
            out.append(sch)
            continue
        keys.add(key)
        out.append(wide)
        widened += 1
    return out, widened
