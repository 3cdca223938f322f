"""Droplet-style coordinate descent: the neighbours of a schedule that differ in one decision.

A neighbour moves one prime factor between two levels of one tile split (keeping the product,
so the split stays perfect; a partitioned split, the mma rule's, also keeps its inner levels'
product a multiple of its ``innerpart_factor``), or steps one categorical choice (unroll depth,
vector width) to the adjacent candidate. Exploiting around the best measured schedule this way finds the local
refinements random mutation keeps missing.
"""

from __future__ import annotations

import math
import random
from typing import List, Tuple


def _prime_factors(value: int) -> List[int]:
    factors, p = [], 2
    while p * p <= value:
        if value % p == 0:
            factors.append(p)
            while value % p == 0:
                value //= p
        p += 1
    if value > 1:
        factors.append(value)
    return factors


def innermost_bound(inst) -> int:
    """A ``SamplePerfectTile`` instruction's bound on its innermost factor (``max_innermost_factor``), -1 for none."""
    return int(inst.attrs[1]) if len(inst.attrs) > 1 else -1


TILE_SAMPLES = ("SamplePerfectTile", "SamplePartitionedTile")


def tile_allows(inst, factors: List[int]) -> bool:
    """Whether a tile split's instruction accepts ``factors``: a perfect tile's innermost bound, a
    partitioned tile's inner levels (from ``partition_pos``) a multiple of ``innerpart_factor``."""
    if inst.kind.name == "SamplePartitionedTile":
        position, multiple = int(inst.attrs[1]), int(inst.attrs[2])
        return math.prod(factors[position:]) % max(1, multiple) == 0
    bound = innermost_bound(inst)
    return not (bound > 0 and factors[-1] > bound)


def ordered_decisions(trace) -> List[Tuple[object, object]]:
    """(instruction, decision) in the trace's instruction order. ``trace.decisions`` is a map keyed
    by instruction objects, which iterates in an order of their addresses: what draws from it with a
    seeded generator must not see that order, or a seeded search picks differently run to run."""
    return [(inst, trace.decisions[inst]) for inst in trace.insts if inst in trace.decisions]


def neighbour_decisions(trace) -> List[Tuple[object, object]]:
    """(instruction, new decision) pairs, each one step away from ``trace``'s decisions."""
    moves = []
    for inst, decision in ordered_decisions(trace):
        kind = inst.kind.name
        if kind in TILE_SAMPLES:
            factors = [int(x) for x in decision]
            for src in range(len(factors)):
                for prime in _prime_factors(factors[src]):
                    for dst in range(len(factors)):
                        if dst == src:
                            continue
                        new = list(factors)
                        new[src] //= prime
                        new[dst] *= prime
                        if tile_allows(inst, new):
                            moves.append((inst, new))
        elif kind == "SampleCategorical":
            index = int(decision)
            for step in (-1, 1):
                if 0 <= index + step < len(inst.attrs[0]):
                    moves.append((inst, index + step))
    return moves


def neighbours(space, trace, limit: int, seed: int) -> List:
    """Up to ``limit`` post-processed neighbour schedules of ``trace`` (random subset of moves)."""
    base = trace.simplified(remove_postproc=True)
    moves = neighbour_decisions(base)
    rng = random.Random(seed)
    rng.shuffle(moves)
    out, tried = [], 0
    while len(out) < limit and tried < len(moves):
        # No more at once than could still be wanted: as many replays as one at a time would make.
        chunk = moves[tried:tried + limit - len(out)]
        tried += len(chunk)
        traces = [base.with_decision(inst, decision, remove_postproc=True) for inst, decision in chunk]
        out.extend(space.replay_valid(traces, rng))
    return out


def unmeasured_neighbours(space, best_trace, limit: int, rng: random.Random, unmeasured, stats) -> List:
    """``neighbours`` of ``best_trace`` (None: none) that ``unmeasured`` accepts, seeded from ``rng``;
    their seconds, replays and count go into ``stats`` (a RoundStats)."""
    replays, found = space.replays, []
    with stats.stage("droplet"):
        if best_trace is not None:
            found = [s for s in neighbours(space, best_trace, limit, rng.randrange(1 << 30)) if unmeasured(s)]
    stats["droplet_replayed"], stats["droplet_valid"], _ = space.replays_since(replays)
    stats["droplet"] = len(found)
    return found


COOPERATIVE_FETCH = "meta_schedule.cooperative_fetch"


def cooperative_fetch_decisions(trace) -> List:
    """The ``SampleCategorical`` instructions of ``trace`` whose draw is a cooperative fetch's
    vector length (MetaSchedule annotates the copy block with the sampled variable)."""
    sampled = [inst for inst in trace.insts if inst.kind.name == "SampleCategorical" and inst in trace.decisions]
    annotated = [inst.inputs[1] for inst in trace.insts
                 if inst.kind.name == "Annotate" and str(inst.attrs[0]) == COOPERATIVE_FETCH]
    return [inst for inst in sampled if any(inst.outputs[0].same_as(value) for value in annotated)]


def operand_fetch_decisions(trace) -> List:
    """The cooperative-fetch draws of ``trace`` that set an operand's copy into shared memory (the
    annotated block comes from ``cache_read``), not the write-back's."""
    read_blocks = [inst.outputs[0] for inst in trace.insts if inst.kind.name == "CacheRead"]
    operand_draws = [inst.inputs[1] for inst in trace.insts
                     if inst.kind.name == "Annotate" and str(inst.attrs[0]) == COOPERATIVE_FETCH
                     and any(inst.inputs[0].same_as(block) for block in read_blocks)]
    return [inst for inst in cooperative_fetch_decisions(trace)
            if any(inst.outputs[0].same_as(value) for value in operand_draws)]


def decisions_but_operand_fetches(trace) -> Tuple:
    """``trace``'s decisions in program order, its operand fetches' draws left out: schedules of one
    tiling that differ only in how wide they fetch their operands share it."""
    fetches = operand_fetch_decisions(trace)
    return tuple(str(trace.decisions[inst]) for inst in trace.insts
                 if inst in trace.decisions and not any(inst.same_as(fetch) for fetch in fetches))


def decision_values(trace) -> Tuple[str, ...]:
    """Every sampled decision of ``trace`` (postprocessors removed) in trace order, as text: two
    schedules of one sketch are Droplet neighbours when exactly one of these differs."""
    base = trace.simplified(remove_postproc=True)
    return tuple(str(base.decisions[inst]) for inst in base.insts if inst in base.decisions)


def annotated_draws(trace) -> List[Tuple[object, str]]:
    """(value, annotation key) of each ``Annotate`` of ``trace`` whose value is a variable (a draw
    or a block), in trace order: which decision feeds which annotation."""
    return [(inst.inputs[1], str(inst.attrs[0])) for inst in trace.insts
            if inst.kind.name == "Annotate" and len(inst.inputs) > 1 and hasattr(inst.inputs[1], "same_as")]


def decision_kinds(trace) -> Tuple[str, ...]:
    """What each decision of ``decision_values(trace)`` sets, in the same order: ``tile N`` (the
    Nth tile split of the trace), ``operand fetch N`` (the vector length of the Nth operand's copy
    into shared memory), else the annotation its draw feeds (``meta_schedule.cooperative_fetch``
    for the write-back's, ``meta_schedule.unroll_explicit``) or ``categorical``. Lets measured
    one-decision neighbours be told apart by what moved."""
    base = trace.simplified(remove_postproc=True)
    operands = operand_fetch_decisions(base)
    annotations = annotated_draws(base)
    kinds, tiles = [], 0
    for inst in base.insts:
        if inst not in base.decisions:
            continue
        if inst.kind.name in TILE_SAMPLES:
            kinds.append(f"tile {tiles}")
            tiles += 1
            continue
        operand = next((i for i, fetch in enumerate(operands) if inst.same_as(fetch)), None)
        if operand is not None:
            kinds.append(f"operand fetch {operand}")
            continue
        kinds.append(next((key for value, key in annotations if value.same_as(inst.outputs[0])), "categorical"))
    return tuple(kinds)


def steps_apart(left: Tuple[str, ...], right: Tuple[str, ...]) -> int:
    """How many decisions two ``decision_values`` differ in (unbounded for different sketches)."""
    if len(left) != len(right):
        return 1 << 30
    return sum(a != b for a, b in zip(left, right))


def tile_decisions(trace) -> Tuple[Tuple[int, ...], ...]:
    """The tile sizes ``trace`` chose (its tile-split decisions, in trace order): schedules equal
    here differ only in categorical choices such as vector widths and unroll depth."""
    return tuple(tuple(int(x) for x in trace.decisions[inst]) for inst in trace.insts
                 if inst.kind.name in TILE_SAMPLES and inst in trace.decisions)
