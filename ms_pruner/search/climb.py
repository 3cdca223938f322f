"""Hill climbing on the analyzer in a cold round: Droplet's coordinate descent before any measurement.

A cold round measures what the analyzer ranks best among the draft, and the draft holds only what
sampling and a generation or few of mutation reached. On the H100's 4096^3 fp16 matmul, the tiling
the analyzer estimates fastest (grid 1024 x 128 threads, 64 trips, 16 KiB + 16 KiB operand tiles)
was in round 0's draft once in the first GPU run, took two more rounds of evolution to fill, and
then measured best (docs/results/h100). So from the best draft member of each of the few best
geometries, the climb moves one tile factor at a time (``droplet.neighbour_decisions``) to the
neighbour the analyzer likes best, for a few steps; every valid schedule it visits joins the draft.
Each visit is one replay with postprocessors (~40 ms on a tensor-core matmul) and one estimate.
"""

from __future__ import annotations

import random
from typing import Callable, Dict, Hashable, List, Optional, Tuple

from .droplet import neighbour_decisions, tile_decisions
from .fetch_width import decisions_but_operand_fetches, wide_fetch_variant_traces


def tile_moves(trace) -> List:
    """(instruction, decision) pairs one tile-factor move away from ``trace``'s tiling."""
    return [(inst, decision) for inst, decision in neighbour_decisions(trace)
            if inst.kind.name == "SamplePerfectTile"]


def climb(space, start, latency: Callable, steps: int, moves_per_step: int, rng: random.Random) -> List:
    """Every valid schedule visited by a best-improvement climb from ``start``: each step replays up to
    ``moves_per_step`` random tile moves of the current schedule and moves to the one with the lowest
    ``latency(schedule)`` if it beats the current one; stops early at a local optimum. A tiling is
    replayed once per climb: the start's and the ones already tried are skipped."""
    base = start.trace.simplified(remove_postproc=True)
    current = latency(start)
    visited, tilings = [], {tile_decisions(base)}
    for _ in range(steps):
        moves = tile_moves(base)
        rng.shuffle(moves)
        better = None
        traces = []
        for inst, decision in moves[:moves_per_step]:
            trace = base.with_decision(inst, decision, remove_postproc=True)
            tiling = tile_decisions(trace)
            if tiling in tilings:  # a step back, or a tiling an earlier step replayed
                continue
            tilings.add(tiling)
            traces.append(trace)
        for sch in space.replay_valid(traces, rng):
            visited.append(sch)
            estimate = latency(sch)
            if estimate < current:
                better, current = sch, estimate
        if better is None:
            break
        base = better.trace.simplified(remove_postproc=True)
    return visited


def best_of_best_geometries(schedules: List, latency: Callable, geometry: Callable, count: int,
                            per_geometry: int = 1, family: Optional[Callable] = None) -> List:
    """The ``per_geometry`` best-estimated members of each of the ``count`` best-estimated geometries
    of ``schedules``, geometry by geometry; with ``family``, no two members of one geometry share it."""
    chosen: Dict[Hashable, List] = {}
    families: Dict[Hashable, set] = {}
    for sch in sorted(schedules, key=latency):
        if latency(sch) == float("inf"):
            break
        key = geometry(sch)
        if key not in chosen:
            if len(chosen) >= count:
                continue
            chosen[key], families[key] = [], set()
        kin = family(sch) if family is not None else id(sch)
        if len(chosen[key]) < per_geometry and kin not in families[key]:
            families[key].add(kin)
            chosen[key].append(sch)
    return [sch for members in chosen.values() for sch in members]


def climb_from_best_geometries(draft: List, space, latency: Callable, geometry: Callable, starts: int, steps: int,
                               moves_per_step: int, rng: random.Random) -> List:
    """Every schedule the climbs visit from the best-estimated member of each of the ``starts`` best
    geometries of ``draft`` (duplicates of the draft or of each other included)."""
    return [visited for sch in best_of_best_geometries(draft, latency, geometry, starts)
            for visited in climb(space, sch, latency, steps, moves_per_step, rng)]


def cold_climb(draft: List, space, latency: Callable, geometry: Callable, key_of: Callable, measured: set,
               starts: int, steps: int, moves_per_step: int, rng: random.Random,
               members: int = 1) -> Tuple[List, List]:
    """(the schedules the climbs from ``draft``'s ``starts`` best geometries visit, the wide fetch-width
    variants of the ``members`` best members of each of the ``starts`` best geometries after the climb),
    each without what ``draft``, ``measured`` (structural hashes) or an earlier schedule already holds.

    Members are told apart by their decisions other than the operand fetches: two that differ only
    there have the same wide variants. More than one member matters where a geometry may take more
    picks than one member has variants: the rest of its picks would go to its favourite variant again.
    """
    seen = {key_of(sch) for sch in draft} | measured

    def unseen(schedules):
        out = []
        for sch in schedules:
            key = key_of(sch)
            if key not in seen:
                seen.add(key)
                out.append(sch)
        return out

    climbed = unseen(climb_from_best_geometries(draft, space, latency, geometry, starts, steps, moves_per_step, rng))
    ends = best_of_best_geometries(draft + climbed, latency, geometry, starts, members,
                                   lambda sch: decisions_but_operand_fetches(sch.trace))
    traces = [variant for sch in ends for variant in wide_fetch_variant_traces(sch.trace)]
    return climbed, unseen(space.replay_valid(traces, rng) if traces else [])
