"""FirstRoundPolicy: how Pruner's cold round and its follow-up choose tensor-core kernels.

A cold round has no measurement: the analyzer alone ranks it, and on a tensor-core space it ties
the variants of its favourite geometry (fetch widths, fragment arrangements) that measure a few
percent apart. The policy acts at four points of a round, and nowhere else:

1. ``expand_draft``: climb from the cold draft's best geometries one tile factor at a time
   (climb.py) and add their wide fetch-width variants and fragment arrangements.
2. ``batch_order``: order the ranked draft's ties in turn and by ptxas's register count
   (tie_order.py), and cap the picks one kernel geometry takes (geometry.py).
3. ``finish``: a floor of picks for each rule family (families.py), then widen narrow operand
   fetches (fetch_width.py); ``carried`` keeps each family in what is carried over.
4. ``follow_up``: measure only ``cold_batch_share`` of the first batch; the rest follows in
   slices around the best measured kernel (follow_up.py).

``PrunerSearch(first_round=None)`` runs without it: plain Pruner.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterable, List, Optional

from .arrangement import arrangement_variant_traces
from .climb import best_of_best_geometries, cold_climb, new_schedules, per_rule_family
from .families import family_lookup, with_family_floor, with_population_families
from .fetch_width import widen_narrow_picks, with_wide_fetch_variants
from .follow_up import FollowUp, resumed_follow_up, slice_sizes
from .geometry import capped_per_group
from .tie_order import TieOrder
from .transplant import transplanted
from ...space import sketch_family, tensor_instruction


class FirstRoundPolicy:
    """The first-round policy of one tuning context, with a resolved FirstRoundConfig."""

    def __init__(self, config, space, facts, target, threads: int, rng):
        self.config = config
        self.space = space
        self.facts = facts
        self.rng = rng  # the strategy's own: a seeded search draws in one order
        self.tie_order = TieOrder(facts, target, threads, config.cold_variant_band, config.cold_ptxas_ties)

    def cold_trials(self, batch: int) -> int:
        """How many of a first batch of ``batch`` the cold round measures."""
        return max(1, int(round(batch * self.config.cold_batch_share)))

    def _family_floor(self, picks: int) -> int:
        """Least members of ``picks`` each rule family keeps (``cold_family_share``)."""
        return int(picks * self.config.cold_family_share)

    def geometry_cap(self, batch: int) -> Optional[int]:
        """Most of a cold batch of ``batch`` one kernel geometry's best-ranked picks may take."""
        if self.config.cold_geometry_share >= 1.0:
            return None
        return max(1, int(round(batch * self.config.cold_geometry_share)))

    def expand_draft(self, draft: List, batch: int, measured: set, stats, population: Optional[List] = None) -> List:
        """``draft``, with each rule family of ``population`` it lost brought back (``cold_family_share``
        of the batch: families.py), and what the analyzer climb adds: the schedules it visits from the best
        geometries, the wide fetch-width variants of each one's best members (as many members as a
        geometry's capped picks need to alternate between two tied variants: half the cap; one
        when no cap holds), and the fragment arrangements of the ``cold_arranged_geometries`` best.
        With ``cold_climb_per_family``, best within each rule family: the family floor's picks of a
        family ranked second are then climbed ones, not only what the draft happened to reach. With
        ``cold_climb_per_instruction`` too, within each sketch's instruction (wmma, m16n8k8, m16n8k16):
        a climb only changes tile factors, so from m16n8k8 starts it never reaches m16n8k16; with
        ``cold_climb_transplants``, each mma instruction's best tilings after the climb are also tried
        on the other's sketch."""
        floor = self._family_floor(batch)
        if floor > 0 and population:
            size = len(draft)
            draft = with_population_families(draft, population, family_lookup(draft + population), floor,
                                             lambda s: self.facts.estimate(s).latency_s, self.facts.key, measured)
            stats["population_families"] = len(draft) - size
        if self.config.cold_climb_starts <= 0:
            return draft
        facts, cap, group = self.facts, self.geometry_cap(batch), self._climb_group()
        with stats.stage("climb"):
            replays = self.space.replays
            climbed, variants, arranged = cold_climb(
                draft, self.space, lambda s: facts.estimate(s).latency_s, facts.geometry, facts.key, measured,
                self.config.cold_climb_starts, self.config.cold_climb_steps, self.config.cold_climb_moves,
                self.rng, members=-(-cap // 2) if cap else 1, arranged=self.config.cold_arranged_geometries,
                rule_family=group)
            transplants = self._transplants(draft + climbed + variants + arranged, measured, group)
        stats["climb_replayed"], stats["climb_valid"], stats["climb_batches"] = self.space.replays_since(replays)
        stats.update(transplanted=len(transplants), climbed=len(climbed), fetch_variants=len(variants),
                     arrangement_variants=len(arranged))
        if group is not None:
            stats["climbed_by_group"] = dict(collections.Counter(str(group(s)) for s in climbed))
        return draft + climbed + variants + arranged + transplants

    def _transplants(self, draft: List, measured: set, group: Optional[Callable]) -> List:
        """The best members of each mma instruction's ``cold_climb_transplants`` best geometries in
        ``draft`` (climbed), replayed on the other instruction's sketches (transplant.py) with their
        arrangement and wide fetch-width variants as the climb's ends have them, new ones only: where
        one instruction's climb ended short of the other's best tiling."""
        count = self.config.cold_climb_transplants
        if count <= 0 or group is None or not self.config.cold_climb_per_instruction:
            return []
        facts = self.facts
        sources = per_rule_family(draft, group, lambda members: best_of_best_geometries(
            members, lambda s: facts.estimate(s).latency_s, facts.geometry, count))
        moved = [trace for sch in sources for trace in transplanted(sch.trace, self.space.sketches)]
        traces = with_wide_fetch_variants([v for trace in moved for v in [trace] + arrangement_variant_traces(trace)])
        schedules = self.space.replay_valid(traces, self.rng) if traces else []
        return new_schedules(schedules, facts.key, {facts.key(s) for s in draft} | measured)

    def _climb_group(self) -> Optional[Callable]:
        """What the climb's starts are chosen within: a sketch's instruction, its rule family, or none."""
        if not self.config.cold_climb_per_family:
            return None
        group = tensor_instruction if self.config.cold_climb_per_instruction else sketch_family
        return lambda sch: group(sch.trace)

    def batch_order(self, size: int, cap_of: int, prior: Optional[collections.Counter] = None):
        """BatchRules.order for a batch of ``size``, capped as a batch of ``cap_of`` is (a follow-up
        slice counts the whole split batch's ``prior`` picks); None when no cap holds."""
        self.tie_order.stats = {}
        cap = self.geometry_cap(cap_of)
        if cap is None:
            return None
        return lambda ranked: capped_per_group(self.tie_order(ranked), cap, self.facts.geometry, size, prior)

    def carried(self, ranked: List, keep: int) -> List:
        """The best-ranked ``keep`` of the unpicked draft, ``cold_family_share`` of them from each
        rule family it holds: cut by rank alone the cold carry can lose a family the analyzer ranks
        low (a 16-thread round's draft of 660 held 37 mma members, none among its best 192), and
        then the follow-up slices and the family floor have none of it."""
        floor = self._family_floor(keep)
        if floor == 0 or len(ranked) <= keep:
            return ranked[:keep]
        return with_family_floor(ranked[:keep], ranked[keep:], family_lookup(ranked), floor)[0]

    def family_floor(self, picks: List, carry: List, batch: int, stats):
        """(picks, carry): ``cold_family_share`` of a cold batch from each rule family the draft
        holds (a space of one family is left as it is), a family's best of each kernel geometry
        first; the picks given up are carried over first. ``family_floor`` counts the picks the
        floor brought in, by family: a family the draft ranks high enough needs none."""
        floor = self._family_floor(batch)
        family = family_lookup(picks + carry)
        ranked_picks = {id(s) for s in picks}
        if floor > 0 and len({family(s) for s in picks + carry}) > 1:
            picks, carry = with_family_floor(picks, carry, family, floor, self._one_a_geometry)
        stats["families"] = dict(collections.Counter(str(family(s)) for s in picks))
        stats["family_floor"] = dict(collections.Counter(str(family(s)) for s in picks if id(s) not in ranked_picks))
        return picks, carry

    def _one_a_geometry(self, members: List) -> List:
        """``members`` with each kernel geometry's best first."""
        return capped_per_group(members, 1, self.facts.geometry, len(members))

    def widen(self, picks: List, excluded: set, stats, kept: frozenset = frozenset()) -> List:
        """``picks`` with narrow operand fetches widened where the analyzer finds it no slower."""
        if not self.config.widen_cold_fetches:
            return picks
        with stats.stage("widen"):
            picks, stats["widened"] = widen_narrow_picks(picks, self.space, self.facts.estimate, self.facts.key,
                                                         excluded, self.rng, kept)
        return picks

    def follow_up(self, full_batch: int, picks: List, stats) -> FollowUp:
        """What the cold round's ``picks`` of a first batch of ``full_batch`` leave to the follow-up."""
        pending = FollowUp(slice_sizes(full_batch - len(picks), self.config.follow_up_slices),
                           collections.Counter(map(self.facts.geometry, picks)))
        stats["follow_up_due"] = pending.sizes[0]
        return pending

    def resumed_follow_up(self, per_iter: int, tried: int, schedules: Iterable) -> Optional[FollowUp]:
        """The follow-up a resumed call owes when an earlier one ended inside the first batch."""
        return resumed_follow_up(per_iter, self.cold_trials(per_iter), tried, self.config.follow_up_slices,
                                 map(self.facts.geometry, schedules))
