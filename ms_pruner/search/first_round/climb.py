"""Hill climbing on the analyzer in a cold round: Droplet's coordinate descent before any measurement.

A cold round measures what the analyzer ranks best among the draft, and the draft holds only what
sampling and a generation or few of mutation reached. On the H100's 4096^3 fp16 matmul, the tiling
the analyzer estimates fastest (grid 1024 x 128 threads, 64 trips, 16 KiB + 16 KiB operand tiles)
was in round 0's draft once in the first GPU run, took two more rounds of evolution to fill, and
then measured best (docs/results/h100). So from the best draft member of each of the few best
geometries, the climb moves one tile factor at a time (``droplet.neighbour_decisions``) to the
neighbour the analyzer likes best, for a few steps; every valid schedule it visits joins the draft.
Each visit is one replay with postprocessors (~40 ms on a tensor-core matmul) and one estimate.

One tile-factor move changes one dimension's tile, so a climb can stall on a block of the wrong
shape: from a 256 x 64 block tile, or from a 128 x 128 one split into 1 x 4 warps of 128 x 32, each
single move leaves a kernel the analyzer likes less (a smaller or a larger block, twice or half the
warps) and the climb stops short of the 128 x 128 block of 2 x 2 warps it ranks first. Where no
single move improves, the climb tries the *reshapes* (``reshape_moves``): a factor moved between
two level groups of one dimension and back between the same groups of another, which keeps the
grid, the warps and each warp's fragment count and changes only how they are shaped. The mma
rule's splits are partitioned ones (a warp's share a multiple of ``innerpart_factor``); they get
the same moves, within that constraint.
"""

from __future__ import annotations

import itertools
import random
from typing import Callable, Dict, Hashable, List, Optional, Tuple

from .arrangement import arrangement_variant_traces, warp_tile_splits
from ..droplet import TILE_SAMPLES, neighbour_decisions, tile_allows, tile_decisions
from .fetch_width import decisions_but_operand_fetches, wide_fetch_variant_traces, with_wide_fetch_variants


def tile_moves(trace) -> List:
    """(instruction, decision) pairs one tile-factor move away from ``trace``'s tiling (perfect splits,
    and the mma rule's partitioned ones within their constraint)."""
    return [(inst, decision) for inst, decision in neighbour_decisions(trace) if inst.kind.name in TILE_SAMPLES]


# The levels of a five-level spatial tile split (MultiLevelTilingTensorCore's S0-S4) that a reshape
# keeps the product of: the grid (blockIdx.y, blockIdx.x), the warps (threadIdx.y), within a warp.
RESHAPE_GROUPS = ((0, 1), (2,), (3, 4))


def _moved(factors: List[int], source: Tuple[int, ...], target: Tuple[int, ...], prime: int,
           allows: Callable[[List[int]], bool]) -> Optional[List[int]]:
    """``factors`` with ``prime`` moved from the innermost level of ``source`` it divides to the
    innermost level of ``target`` where the split ``allows`` the result; None if there is none."""
    start = next((level for level in reversed(source) if factors[level] % prime == 0), None)
    if start is None:
        return None
    for level in reversed(target):
        new = list(factors)
        new[start] //= prime
        new[level] *= prime
        if allows(new):
            return new
    return None


def reshape_moves(trace, prime: int = 2) -> List[Tuple[Tuple, Tuple]]:
    """((instruction, decision), (instruction, decision)) pairs: ``prime`` moved from level group g
    to level group h of one five-level spatial tile split and from h to g of another (``RESHAPE_GROUPS``;
    within a group, its innermost level that allows it: one move per pair of splits and of groups).
    Each group's product over the two dimensions stays, so grid size, warps a block and fragments a
    warp stay; the block tile's or the warps' aspect changes."""
    moves = []
    for first, second in itertools.permutations(warp_tile_splits(trace), 2):
        own = [[int(x) for x in trace.decisions[inst]] for inst in (first, second)]
        for g, h in itertools.combinations(RESHAPE_GROUPS, 2):
            new_first = _moved(own[0], g, h, prime, lambda f: tile_allows(first, f))
            new_second = _moved(own[1], h, g, prime, lambda f: tile_allows(second, f))
            if new_first is not None and new_second is not None:
                moves.append(((first, new_first), (second, new_second)))
    return moves


class _Climb:
    """One best-improvement climb: its current trace and estimate, and the tilings it has tried (its
    start's included), each replayed once: a step back or a tiling an earlier step tried is skipped."""

    def __init__(self, start, latency: Callable):
        self.base = start.trace.simplified(remove_postproc=True)
        self.current = latency(start)
        self.tilings = {tile_decisions(self.base)}
        self.better = None

    def fresh(self, traces) -> List:
        """Those of ``traces`` whose tiling this climb has not tried, noted as tried."""
        out = []
        for trace in traces:
            tiling = tile_decisions(trace)
            if tiling not in self.tilings:
                self.tilings.add(tiling)
                out.append(trace)
        return out

    def moves(self, moves_per_step: int, rng: random.Random) -> List:
        """Up to ``moves_per_step`` random untried tile moves of the current trace."""
        moves = tile_moves(self.base)
        rng.shuffle(moves)
        return self.fresh(self.base.with_decision(inst, decision, remove_postproc=True)
                          for inst, decision in moves[:moves_per_step])

    def reshapes(self) -> List:
        """The untried reshapes of the current trace: where no single move helps."""
        base = self.base
        return self.fresh(base.with_decision(a, da, remove_postproc=True).with_decision(b, db, remove_postproc=True)
                          for (a, da), (b, db) in reshape_moves(base))


def _replay_step(space, proposals: List[Tuple[_Climb, List]], latency: Callable, rng: random.Random,
                 visited: List) -> None:
    """Replay every climb's proposed traces in one batch (the tuning context's threads take them all
    at once) and note in each climb the best valid one that beats its current estimate."""
    owners = [climb for climb, traces in proposals for _ in traces]
    if not owners:
        return
    schedules = space.replay_each([trace for _, traces in proposals for trace in traces], rng)
    for climb, sch in zip(owners, schedules):
        if sch is not None:
            visited.append(sch)
            estimate = latency(sch)
            if estimate < climb.current:
                climb.better, climb.current = sch, estimate


def climb(space, starts: List, latency: Callable, steps: int, moves_per_step: int, rng: random.Random) -> List:
    """Every valid schedule visited by best-improvement climbs from each of ``starts``: each step
    replays up to ``moves_per_step`` random tile moves of a climb's current schedule, and, when none
    of them beats it, its reshapes (``reshape_moves``), and moves to the one with the lowest
    ``latency(schedule)`` if it beats the current one; a climb stops early at a local optimum. The
    climbs go in lockstep, a step's replays of all of them in one batch: one climb's step holds a
    few dozen replays, fewer than a many-core host replays at once."""
    climbs = [_Climb(start, latency) for start in starts]
    visited: List = []
    for _ in range(steps):
        for c in climbs:
            c.better = None
        _replay_step(space, [(c, c.moves(moves_per_step, rng)) for c in climbs], latency, rng, visited)
        stuck = [c for c in climbs if c.better is None]
        _replay_step(space, [(c, c.reshapes()) for c in stuck], latency, rng, visited)
        climbs = [c for c in climbs if c.better is not None]
        if not climbs:
            break
        for c in climbs:
            c.base = c.better.trace.simplified(remove_postproc=True)
    return visited


def new_schedules(schedules: List, key_of: Callable, seen: set) -> List:
    """Those of ``schedules`` whose ``key_of`` is not in ``seen`` (nor an earlier one's), each noted there."""
    out = []
    for sch in schedules:
        key = key_of(sch)
        if key not in seen:
            seen.add(key)
            out.append(sch)
    return out


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


def per_rule_family(schedules: List, rule_family: Optional[Callable], select: Callable[[List], List]) -> List:
    """``select`` applied to each rule family's share of ``schedules`` (in the order the families first
    appear there), or to all of them without ``rule_family``."""
    if rule_family is None:
        return select(schedules)
    groups: Dict[Hashable, List] = {}
    for sch in schedules:
        groups.setdefault(rule_family(sch), []).append(sch)
    return [chosen for group in groups.values() for chosen in select(group)]


def climb_from_best_geometries(draft: List, space, latency: Callable, geometry: Callable, starts: int, steps: int,
                               moves_per_step: int, rng: random.Random, rule_family: Optional[Callable] = None) -> List:
    """Every schedule the climbs visit from the best-estimated member of each of the ``starts`` best
    geometries of ``draft`` (of each rule family's share of it, with ``rule_family``; duplicates of
    the draft or of each other included)."""
    origins = per_rule_family(draft, rule_family,
                              lambda group: best_of_best_geometries(group, latency, geometry, starts))
    return climb(space, origins, latency, steps, moves_per_step, rng)


def cold_climb(draft: List, space, latency: Callable, geometry: Callable, key_of: Callable, measured: set,
               starts: int, steps: int, moves_per_step: int, rng: random.Random,
               members: int = 1, arranged: int = 0, rule_family: Optional[Callable] = None) -> Tuple[List, List, List]:
    """(the schedules the climbs from ``draft``'s ``starts`` best geometries visit, the wide fetch-width
    variants of the ``members`` best members of each of the ``starts`` best geometries after the climb,
    the arrangement variants of the best member of each of the ``arranged`` best geometries after the
    climb, each also at its wide fetch widths), each without what ``draft``, ``measured`` (structural
    hashes) or an earlier schedule already holds. With ``rule_family``, each rule family of the draft
    has its own best geometries: where one family ranks first, the family floor's picks of the other
    (families.py) are then climbed ones too, not the draft's luck.

    Members are told apart by their decisions other than the operand fetches: two that differ only
    there have the same wide variants. More than one member matters where a geometry may take more
    picks than one member has variants: the rest of its picks would go to its favourite variant again.
    Arrangements (arrangement.py) are what those members' variants leave to the draft's luck: which
    ones its members loop, often one for most of them.
    """
    seen = {key_of(sch) for sch in draft} | measured

    def unseen(schedules):
        return new_schedules(schedules, key_of, seen)

    def replayed(traces):
        return unseen(space.replay_valid(traces, rng) if traces else [])

    climbed = unseen(climb_from_best_geometries(draft, space, latency, geometry, starts, steps, moves_per_step, rng,
                                                rule_family))
    ends = per_rule_family(draft + climbed, rule_family, lambda group: best_of_best_geometries(
        group, latency, geometry, starts, members, lambda sch: decisions_but_operand_fetches(sch.trace)))
    variants = replayed([variant for sch in ends for variant in wide_fetch_variant_traces(sch.trace)])
    arranged_ends = per_rule_family(draft + climbed, rule_family,
                                    lambda group: best_of_best_geometries(group, latency, geometry, arranged))
    rearranged = [trace for sch in arranged_ends for trace in arrangement_variant_traces(sch.trace)]
    return climbed, variants, replayed(with_wide_fetch_variants(rearranged))
