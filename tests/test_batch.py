"""Composing a measured batch (search/verify.py) and the per-geometry cap, on plain strings."""

import random

from ms_pruner.search.verify import BatchRules, compose_batch
from ms_pruner.search.first_round.geometry import capped_per_group


def _key(name):
    return name


def _group(name):
    return name[0]


def test_neighbours_first_then_the_capped_draft_then_the_random_share():
    neighbours = ["n1", "n2", "n3", "n4", "n5"]
    ranked = ["a1", "a2", "a3", "b1", "a4", "c1", "b2", "c2", "a5", "c3"]
    draft = sorted(ranked)
    rules = BatchRules(size=8, droplet_share=0.25, eps_greedy=0.5, order=lambda r: capped_per_group(r, 2, _group, 8))
    picks, rest = compose_batch(neighbours, draft, ranked, rules, _key, {"n2"}, random.Random(0))
    assert picks[:2] == ["n1", "n3"]  # n2 was measured
    assert picks[2:5] == ["a1", "a2", "b1"]  # a1 and a2 fill geometry a's cap of 2
    assert len(picks) == 8 and len(set(picks)) == 8
    assert set(picks[5:]) <= set(draft)  # the random share, from the draft
    assert rest == [r for r in ["a1", "a2", "b1", "c1", "b2", "c2", "a3", "a4", "a5", "c3"] if r not in picks]


def test_a_short_stage_is_topped_up_from_the_ranked_draft():
    rules = BatchRules(size=4, droplet_share=0.5, eps_greedy=0.0)
    picks, rest = compose_batch(["n1"], ["a1", "a2", "a3", "a4"], ["a4", "a3", "a2", "a1"], rules, _key, set(),
                                random.Random(0))
    assert picks == ["n1", "a4", "a3", "a2"] and rest == ["a1"]


def test_the_cap_counts_what_the_first_part_of_a_split_batch_took():
    ranked = ["a1", "a2", "b1", "a3", "c1", "b2"]
    assert capped_per_group(ranked, 2, _group, len(ranked), taken={"a": 1, "b": 2}) == \
        ["a1", "c1", "a2", "b1", "a3", "b2"]
    rules = BatchRules(size=3, droplet_share=0.0, eps_greedy=0.0,
                       order=lambda r: capped_per_group(r, 2, _group, 3, taken={"a": 2}))
    picks, _ = compose_batch([], ranked, ranked, rules, _key, set(), random.Random(0))
    assert picks == ["b1", "c1", "b2"]


def test_variants_estimated_as_ties_take_turns_within_their_geometry():
    from ms_pruner.search.first_round.geometry import spread_variants

    # name: geometry letter, fetch-width variant, estimate (us)
    est = {"a1": ("a", "16/16", 100.0), "a2": ("a", "16/16", 100.0), "b1": ("b", "16/16", 120.0),
           "a3": ("a", "16/16", 100.0), "a4": ("a", "8/16", 100.4), "b2": ("b", "8/8", 120.5),
           "a5": ("a", "4/4", 103.0), "a6": ("a", "8/8", 100.8), "a7": ("a", "8/16", 100.4)}
    ranked = ["a1", "a2", "b1", "a3", "a4", "b2", "a5", "a6", "a7"]
    spread = spread_variants(ranked, lambda x: est[x][0], lambda x: (est[x][1],), lambda x: est[x][2], 0.01)
    # a's positions (0, 1, 3, 4, 6, 7, 8) get the first of each tied variant in rank order, then the
    # second of each, then a5, whose estimate is 3% off a's best; b keeps its positions and order
    assert spread == ["a1", "a4", "b1", "a6", "a2", "b2", "a7", "a3", "a5"]
    # with no band only a's equal best estimates tie, all one variant: the ranking stands
    assert spread_variants(ranked, lambda x: est[x][0], lambda x: (est[x][1],), lambda x: est[x][2], 0.0) == ranked
    spread = lambda r: spread_variants(r, _group, lambda x: (est[x][1],), lambda x: est[x][2], 0.01)  # noqa: E731
    rules = BatchRules(size=4, droplet_share=0.0, eps_greedy=0.0,
                       order=lambda r: capped_per_group(spread(r), 3, _group, 4))
    picks, _ = compose_batch([], ranked, ranked, rules, _key, set(), random.Random(0))
    assert picks == ["a1", "a4", "b1", "a6"]  # geometry a's three capped picks are its three tied variants
    rules.order = lambda r: capped_per_group(r, 3, _group, 4)
    picks, _ = compose_batch([], ranked, ranked, rules, _key, set(), random.Random(0))
    assert picks == ["a1", "a2", "b1", "a3"]


def test_tied_members_take_turns_over_fetch_widths_and_arrangements_together():
    """With two factors (fetch widths, fragment arrangement) each next tied member is the best-ranked
    whose two values were placed least so far: the four fetch variants and three arrangements each
    come up before any comes up again, where one factor alone would leave the arrangements to rank."""
    from ms_pruner.search.first_round.geometry import spread_variants

    fetches, arrangements = ["16/16", "16/8", "8/16", "8/8"], ["1x4", "2x2", "4x1"]
    # the draft ranks by fetch width, arrangement 1x4 first in each: the order ties come in
    ranked = [f"{f}|{a}" for f in fetches for a in arrangements]
    spread = spread_variants(ranked, lambda x: "a", lambda x: tuple(x.split("|")), lambda x: 100.0, 0.01)
    first = [name.split("|") for name in spread[:4]]
    assert sorted(f for f, _ in first) == sorted(fetches)
    assert {a for _, a in first[:3]} == set(arrangements)
    assert spread[:4] == ["16/16|1x4", "16/8|2x2", "8/16|4x1", "8/8|1x4"]
    assert sorted(spread) == sorted(ranked)
    by_fetch_only = spread_variants(ranked, lambda x: "a", lambda x: (x.split("|")[0],), lambda x: 100.0, 0.01)
    assert {name.split("|")[1] for name in by_fetch_only[:4]} == {"1x4"}


def test_best_members_of_the_best_geometries_are_of_distinct_families():
    """The members whose wide fetch variants a cold draft gains (climb.best_of_best_geometries): the
    best of each of the best geometries, and with ``per_geometry`` more of each, skipping members of a
    family already taken (schedules that differ only in their operand fetches)."""
    from ms_pruner.search.first_round.climb import best_of_best_geometries

    # name: geometry letter, family (decisions but the operand fetches), estimate (us)
    est = {"a1": ("a", "x", 100.0), "a2": ("a", "x", 100.1), "a3": ("a", "y", 100.2), "a4": ("a", "z", 100.3),
           "b1": ("b", "x", 101.0), "b2": ("b", "y", 101.5), "c1": ("c", "x", 102.0), "d1": ("d", "x", float("inf"))}
    names = ["c1", "a4", "b2", "a1", "d1", "a3", "b1", "a2"]
    latency, geometry, family = (lambda x: est[x][2]), _group, (lambda x: est[x][1])
    assert best_of_best_geometries(names, latency, geometry, 2) == ["a1", "b1"]
    assert best_of_best_geometries(names, latency, geometry, 2, per_geometry=2) == ["a1", "a2", "b1", "b2"]
    assert best_of_best_geometries(names, latency, geometry, 2, 2, family) == ["a1", "a3", "b1", "b2"]
    assert best_of_best_geometries(names, latency, geometry, 5, 3, family) == ["a1", "a3", "a4", "b1", "b2", "c1"]


def test_a_pick_that_repeats_a_kernel_is_passed_over_and_not_carried():
    """``repeats`` (same_kernel.SameKernels.repeats) is asked once per schedule, in pick order."""
    asked = []

    def repeats(name):
        asked.append(name)
        return name.endswith("'")  # a2' is a2 with an unroll depth that changes nothing

    rules = BatchRules(size=3, droplet_share=0.0, eps_greedy=0.0)
    ranked = ["a1", "a2'", "a2", "a3", "a4"]
    picks, rest = compose_batch([], ranked, ranked, rules, _key, set(), random.Random(0), repeats=repeats)
    assert picks == ["a1", "a2", "a3"] and rest == ["a4"]
    assert asked == ["a1", "a2'", "a2", "a3"]


def test_ties_ptxas_allots_clearly_fewer_registers_go_first_alternating_with_the_turns():
    """The favourite geometry's ties (estimated within the band of its best), in their turn order:
    those at least REGISTER_MARGIN under the ties' median and not spilling go first, fewest first,
    alternating with the others; another geometry, and members outside the band or past ``count``,
    keep their positions."""
    from types import SimpleNamespace

    from ms_pruner.search.first_round.ptxas_ties import REGISTER_MARGIN, fewer_registers_first, order_ties_by_registers

    registers = [246, 244, 230, 246, 216, 244, 228, None]
    spills = [False, False, False, False, False, False, True, False]
    order, promoted = fewer_registers_first(registers, spills)
    # median 244: 216 and 230 are under it by the margin; 228 spills, so it waits its turn
    assert (order, promoted) == ([4, 0, 2, 1, 3, 5, 6, 7], 2)
    assert fewer_registers_first([246, 246 - REGISTER_MARGIN + 1, 246], [False] * 3) == ([0, 1, 2], 0)
    assert fewer_registers_first([200, None], [False, False]) == ([0, 1], 0)  # one count is no median

    # name: geometry, estimate (us), registers
    est = {"a1": ("a", 100.0, 246), "b1": ("b", 101.0, 100), "a2": ("a", 100.2, 246), "a3": ("a", 100.5, 216),
           "a4": ("a", 103.0, 200), "a5": ("a", 100.1, 230), "a6": ("a", 100.3, 220)}
    ranked = ["a1", "b1", "a2", "a3", "a4", "a5", "a6"]
    asked = []

    def resources_of(items):
        asked.extend(items)
        return [SimpleNamespace(registers=est[i][2], spills=False) for i in items]

    reordered, promoted = order_ties_by_registers(ranked, lambda x: est[x][0], lambda x: est[x][1], 0.01, 4,
                                                  resources_of)
    # a4 is 3% off a's best and a6 is the fifth tie: neither is compiled, and both keep their places
    assert asked == ["a1", "a2", "a3", "a5"] and promoted == 2
    assert reordered == ["a3", "b1", "a1", "a5", "a4", "a2", "a6"]
    assert order_ties_by_registers(ranked, lambda x: est[x][0], lambda x: est[x][1], 0.01, 0, resources_of) == \
        (ranked, 0)
