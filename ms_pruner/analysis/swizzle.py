"""Whether a copy into the mma rule's permuted (swizzled) shared layout stays one 16-byte vector a
thread, or becomes a synchronous gather.

TVM lowers the rule's global->shared copies (``auto_copy`` blocks marked ``permuted_layout``) in
two steps. MemHammer fuses the tile's loops and splits the fused index over the block's threads
and the vector lanes (``memhammer_coalesce.cc``: ``f = ((outer * ty + ty_i) * 32 + tx) * lanes +
lane``, ``row = f // W``, ``col = f % W`` for a tile of rows of W elements). InjectPermutedLayout
then swizzles each row's 16-byte chunks: ``col // 8`` becomes ``col // 8 ^ row % 8`` (rows of a
multiple of 64 elements) or ``col // 8 ^ row % 8 // 2`` (of 32). Where TVM's simplifier cannot
take the lane out of ``f // W`` (W not a multiple of the strides the threads step by, e.g. 96 or
384 elements against 256-element warp steps), the lane stays inside the XOR: the vector store's
index is no longer a ramp, InjectPTXAsyncCopy cannot make it a ``cp.async``, and the copy becomes
a synchronous global load and shared store (SASS LDG + STS; one element at a time where the load
is guarded, as a padded conv2d input is). ``swizzle_gathers`` builds that index and simplifies it
with TVM's own arithmetic analyzer, as lowering does, with each loop's range known.

Our builder writes such copies out by chunk before lowering (builder/copy_lanes.py), which keeps
every one a cp.async; ``permuted_copy_facts`` calls a copy gathered only where that is switched off
(``MS_PRUNER_SEPARATE_COPY_LANES=0``), as TVM's own lowering would leave it.
"""

from __future__ import annotations

import functools
from typing import Dict, Sequence, Tuple

import tvm
from tvm.sym import Analyzer

from ..builder.copy_lanes import copy_lanes_separated, copy_threads
from .access import _find_load, guard_of
from .index_cost import element_divisions

CHUNK_ELEMENTS = 8  # InjectPermutedLayout's VECTORIZE_FACTOR: one 16-byte fp16 chunk


@functools.lru_cache(maxsize=4096)
def swizzle_gathers(rows: int, width: int, thread_extents: Tuple[int, ...], lanes: int) -> bool:
    """Whether the permuted copy of a ``rows x width`` tile, split over ``thread_extents`` (threadIdx
    z, y, x as bound, outermost first) and ``lanes`` vector lanes, leaves the lane inside the
    swizzled shared index (a gather), rather than adding it once (a ramp: one vector store)."""
    if lanes <= 1 or width % 32:
        return False
    tir = tvm.tirx
    threads = 1
    for extent in thread_extents:
        threads *= extent
    outer_extent = max(1, -(-rows * width // (threads * lanes)))
    loop_vars = [tir.Var(f"t{i}", "int32") for i in range(len(thread_extents))]
    outer, lane = tir.Var("outer", "int32"), tir.Var("lane", "int32")
    with_lane, lane_zero = Analyzer(), Analyzer()
    for var, extent in [(outer, outer_extent), *zip(loop_vars, thread_extents)]:
        for analyzer in (with_lane, lane_zero):
            analyzer.bind(var, tvm.ir.Range(0, extent))
    with_lane.bind(lane, tvm.ir.Range(0, lanes))
    lane_zero.bind(lane, tir.IntImm("int32", 0))
    fused = outer
    for var, extent in zip(loop_vars, thread_extents):
        fused = fused * extent + var
    fused = fused * lanes + lane
    row, col = tir.floormod(tir.floordiv(fused, width), rows), tir.floormod(fused, width)
    swizzle = tir.floormod(row, 8) if width % 64 == 0 else tir.floordiv(tir.floormod(row, 8), 2)
    chunk = tir.bitwise_xor(tir.floordiv(col, CHUNK_ELEMENTS), swizzle)
    swizzled_col = with_lane.simplify(chunk * CHUNK_ELEMENTS + tir.floormod(col, CHUNK_ELEMENTS))
    index = with_lane.simplify(row * width + swizzled_col)
    step = with_lane.simplify(index - lane_zero.simplify(index))
    return not (isinstance(step, tir.Var) and step.same_as(lane))


def permuted_copy_facts(body, shape: Sequence[int], thread_extents: Dict[str, int],
                        lanes: int) -> Tuple[bool, bool, int]:
    """(gathered, guarded, divisions) of a permuted auto copy whose element loops are ``body``, whose
    tile is ``shape`` and whose enclosing thread bindings are ``thread_extents``. A gathered copy
    whose load is guarded (a padded input) runs one element at a time, each computing its own
    address: the divisions by non-powers of two of its im2col index and bounds test, and those
    splitting the fused index into rows of W elements."""
    rows, width = (int(shape[-2]), int(shape[-1])) if len(shape) > 1 else (1, int(shape[-1]))
    threads = tuple(extent for _, extent in copy_threads(thread_extents))
    gathered = not copy_lanes_separated() and swizzle_gathers(rows, width, threads, lanes)
    nest, store = [], body
    while type(store).__name__ == "For":
        nest.append(store.loop_var)
        store = store.body
    guard = guard_of(store) if type(store).__name__ == "BufferStore" else None
    if not (gathered and guard is not None):
        return gathered, guard is not None, 0
    load = _find_load(guard.args[1])
    exprs = [guard.args[0]] + (list(load.indices) if load is not None else [])
    return True, True, element_divisions(exprs, nest) + (2 if width & (width - 1) else 0)
