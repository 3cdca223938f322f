"""A tiling carried from one mma instruction's sketch to the other's (m16n8k8 <-> m16n8k16).

The climb starts from each instruction's own best geometries (``cold_climb_per_instruction``) and
moves tile factors, never the instruction. Where the draft reached good tilings of one instruction
and poor ones of the other, the other's climb starts far from them: in a 16-thread H200 cold round
of the 4096^3 matmul (seed 0), m16n8k8's best estimate was 350.7 us and m16n8k16's climbed no
nearer than 484 us, though the same tiling on m16n8k16 estimates 331.4 us (seeds 1-3 reached it).

The two sketches are built alike: the same instructions with the same attributes at each pipeline
depth. Their M and N splits count the same m16 and n8 tiles; only the K split counts steps of the
instruction's k (8 or 16). A transplant replays a trace's decisions on the sibling sketch of its
depth with the K split counted anew, each fragment loop covering the same k elements where the
instruction's k and the split's innermost limit allow.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

from ...database.transfer import construction, on_sketch, refactor
from ...space import mma_shape, pipeline_depth


def instruction_k(shape: str) -> int:
    """The k of an ``m16n8kK`` instruction name."""
    return int(shape.rsplit("k", 1)[1])


def k_split(factors: Sequence[int], old_k: int, new_k: int, max_innermost: int = 0) -> Optional[List[int]]:
    """A K split of ``factors`` steps of ``old_k`` counted in steps of ``new_k``: the innermost factor
    covers the same k elements where it can (at least one step, at most ``max_innermost``), the
    outer ones re-factored around it (``refactor``); None where K is no whole number of new steps."""
    total = math.prod(int(f) for f in factors) * old_k
    if total % new_k:
        return None
    extent = total // new_k
    inner = max(1, int(factors[-1]) * old_k // new_k)
    if max_innermost > 0:
        inner = min(inner, max_innermost)
    while extent % inner:
        inner -= 1
    if len(factors) == 1:
        return [extent]
    return refactor(factors[:-1], extent // inner) + [inner]


def _k_counted_in(old_k: int, new_k: int):
    """An ``on_sketch`` adapter: the K split (the mma sketches' one ``SamplePerfectTile``) counted
    anew (``k_split``), every other decision kept."""
    def adapt(inst, decision):
        if inst.kind.name != "SamplePerfectTile":
            return decision
        return k_split([int(d) for d in decision], old_k, new_k, int(inst.attrs[1]))

    return adapt


def transplanted(trace, sketches: Sequence) -> List:
    """``trace``'s decisions on each of ``sketches`` of another mma instruction built as its own
    sketch is, at its pipeline depth; none for a trace off the mma family."""
    shape = mma_shape(trace)
    if shape is None:
        return []
    source = trace.simplified(remove_postproc=True)
    built, depth = construction(source), pipeline_depth(source)
    out = []
    for sketch in sketches:
        other = mma_shape(sketch)
        if other in (None, shape) or pipeline_depth(sketch) != depth or construction(sketch) != built:
            continue
        moved = on_sketch(source, sketch, _k_counted_in(instruction_k(shape), instruction_k(other)))
        if moved is not None:
            out.append(moved)
    return out
