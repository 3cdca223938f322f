"""Composing a measured batch (search/batch.py) and the per-geometry cap, on plain strings."""

import random

from ms_pruner.search.batch import BatchRules, compose_batch
from ms_pruner.search.geometry import capped_per_group


def _key(name):
    return name


def _group(name):
    return name[0]


def test_neighbours_first_then_the_capped_draft_then_the_random_share():
    neighbours = ["n1", "n2", "n3", "n4", "n5"]
    ranked = ["a1", "a2", "a3", "b1", "a4", "c1", "b2", "c2", "a5", "c3"]
    draft = sorted(ranked)
    rules = BatchRules(size=8, droplet_share=0.25, eps_greedy=0.5, geometry_cap=2)
    picks, rest = compose_batch(neighbours, draft, ranked, rules, _key, {"n2"}, random.Random(0), _group)
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
    rules = BatchRules(size=3, droplet_share=0.0, eps_greedy=0.0, geometry_cap=2, prior_counts={"a": 2})
    picks, _ = compose_batch([], ranked, ranked, rules, _key, set(), random.Random(0), _group)
    assert picks == ["b1", "c1", "b2"]
