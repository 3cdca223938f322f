"""How a warp loops its fragments: the arrangements of one tensor-core tiling.

MultiLevelTilingTensorCore splits each spatial dimension into five levels (S0-S4); a warp's
fragments along a dimension are its S3 x S4 factors, S3 looped outside the innermost reduction
and S4 inside it. Re-splitting S3 x S4 keeps the kernel geometry (grid, warps, fragments a warp,
tiles) and everything the analyzer estimates, while ptxas allots such kernels registers and
schedules their HMMAs differently: on the H100's 4096^3 matmul, the favourite geometry's records
measured 1-5% apart between arrangements of one fetch-width variant (docs/analyzer.md, section 3).
A cold round cannot rank them, so it takes them in turn (geometry.spread_variants).
"""

from __future__ import annotations

import itertools
from typing import List, Tuple

from ..droplet import TILE_SAMPLES, tile_allows

WARP_LEVELS = (3, 4)


def warp_tile_splits(trace) -> List:
    """The five-level tile splits of ``trace`` (its spatial ones: WMMA's ``SamplePerfectTile``, the mma
    rule's ``SamplePartitionedTile``), in trace order."""
    return [inst for inst in trace.insts if inst.kind.name in TILE_SAMPLES and inst in trace.decisions
            and len(trace.decisions[inst]) == 5]


def fragment_arrangement(trace) -> Tuple[Tuple[int, int], ...]:
    """Each five-level spatial split's (S3, S4) factors: () for a trace without one (a CPU sketch)."""
    return tuple(tuple(int(trace.decisions[inst][level]) for level in WARP_LEVELS)
                 for inst in warp_tile_splits(trace))


def _warp_splits(inst, factors: List[int]) -> List[Tuple[int, int]]:
    """Every (S3, S4) with the product of ``factors``' that ``inst`` allows."""
    product = factors[3] * factors[4]
    return [(product // inner, inner) for inner in range(1, product + 1)
            if product % inner == 0 and tile_allows(inst, factors[:3] + [product // inner, inner])]


def arrangement_variant_traces(trace) -> List:
    """``trace`` with its warp fragments arranged every other way (each five-level split's S3 x S4
    re-split over its divisors, as far as the split allows), postprocessors removed; the
    valid ones, once replayed, are the arrangement variants of its tiling."""
    base = trace.simplified(remove_postproc=True)
    splits = warp_tile_splits(base)
    own = [[int(x) for x in base.decisions[inst]] for inst in splits]
    choices = [_warp_splits(inst, factors) for inst, factors in zip(splits, own)]
    traces = []
    for combination in itertools.product(*choices):
        if all(pair == (factors[3], factors[4]) for pair, factors in zip(combination, own)):
            continue
        variant = base
        for inst, factors, (outer, inner) in zip(splits, own, combination):
            if (outer, inner) != (factors[3], factors[4]):
                variant = variant.with_decision(inst, factors[:3] + [outer, inner], remove_postproc=True)
        traces.append(variant)
    return traces


def arrangement_name(arrangement: Tuple[Tuple[int, int], ...]) -> str:
    """``fragment_arrangement``'s value as the docs write it: ``i 1x4, j 2x2`` (S3xS4 of the row and
    column dimensions) for a two-dimensional tiling, ``s0 ..., s1 ..., s2 ...`` for more; "" for none."""
    names = ("i", "j") if len(arrangement) == 2 else tuple(f"s{n}" for n in range(len(arrangement)))
    return ", ".join(f"{name} {outer}x{inner}" for name, (outer, inner) in zip(names, arrangement))
