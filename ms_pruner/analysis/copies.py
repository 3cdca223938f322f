"""What the analyzer learns about one copy block, and a memory of it across the candidates of a search.

A global<->shared copy's facts (its predicate's kept share, each warp's sectors and wavefronts, the
divisions its im2col index computes, whether code generation scalarizes its vector loop, its
storage_align padding) come from evaluating its index expressions and from TVM's arithmetic
simplifier: most of a conv2d candidate's analysis. They depend only on the copy block and the
loops around it, and the candidates of one search share most copies: a cold conv2d round on the
H100 target walked 4236 copies and computed 865 of them (``scripts/bench_search.py``'s round log:
``copies_walked``, ``copies_computed``; a mutation changes one tile or one annotation and leaves
the other operand's fetch as it was). So they are kept by a structural
hash of the block with its loop variables, plus the loops' extents, kinds and thread tags (all that
``copy_facts`` reads of a loop: an unroll depth changed on the loop around a copy leaves it as it was).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import tvm_ffi
from tvm.sym import Analyzer, IntervalSet

from .access import (WarpAccess, _int, predicate_ratio, scalar_requests, scalarized_vector_loop, vector_loops,
                     warp_access)
from .index_cost import address_divisions
from .memory import BoundedMemory

# Copies remembered (at least this many, at most twice; each a few hundred bytes).
REMEMBERED_COPIES = 1 << 16


@dataclasses.dataclass(frozen=True)
class CopyFacts:
    """One copy block's memory behaviour, as ``_Walker.resolve_copies`` records it on its BlockInfo."""

    active_ratio: float = 1.0
    access: Optional[WarpAccess] = None
    address_divisions: int = 0
    scalarized: Optional[int] = None  # index (in the block's loops) of a vector loop run one lane at a time
    pad_ratio: float = 1.0


def copy_facts(realize, store, loops: Sequence, loop_vars: Sequence, own_start: int, align,
               warp_size: int = 32) -> CopyFacts:
    """The facts of one copy block (``loops``: its enclosing loops as ``tir_walk.Loop``, outermost
    first; ``align``: its ``buffer_dim_align`` annotation or None)."""
    active_ratio = 1.0
    if type(realize.predicate).__name__ != "IntImm":
        active_ratio = predicate_ratio(realize, loops, loop_vars, own_start)
    pad = pad_ratio(realize, store, loops, loop_vars, own_start, align) if align is not None else 1.0
    if not in_gpu_kernel(loops):
        return CopyFacts(active_ratio=active_ratio, pad_ratio=pad)
    access = warp_access(realize, store, loops, loop_vars, own_start, warp_size)
    divisions = address_divisions(realize, store, loops, loop_vars, own_start)
    scalarized = scalarized_vector_loop(realize, store, loops, loop_vars, own_start)
    if scalarized is None and access is not None and not access.lanes_contiguous:
        scalarized = vector_loops(loops, own_start)[-1]
    if scalarized is not None:
        serial = list(loops)
        serial[scalarized] = dataclasses.replace(serial[scalarized], kind="serial")
        scalar = warp_access(realize, store, serial, loop_vars, own_start, warp_size)
        if access is not None and scalar is not None:
            access = scalar_requests(access, scalar)
    return CopyFacts(active_ratio=active_ratio, access=access, address_divisions=divisions, scalarized=scalarized,
                     pad_ratio=pad)


def in_gpu_kernel(loops: Sequence) -> bool:
    """Whether a loop around the block is bound to a block index: only then are a copy's warp access
    and index costs read."""
    return any(loop.thread is not None and loop.thread.startswith("blockIdx") for loop in loops)


def pad_ratio(realize, store, loops: Sequence, loop_vars: Sequence, own_start: int, align) -> float:
    """Padded over dense size of the tile a copy writes, under its storage_align annotation."""
    analyzer = Analyzer()
    dom = {var: IntervalSet(0, loop.extent - 1) for var, loop in zip(loop_vars[own_start:], loops[own_start:])}
    bindings = {iv.var: value for iv, value in zip(realize.block.iter_vars, realize.iter_values)}
    extents = []
    for index in store.indices:
        bound = analyzer.int_set(bindings.get(index, index), dom)
        extents.append(_int(analyzer.simplify(bound.max_value - bound.min_value), 0) + 1)
    ratio = 1.0
    for entry in align:
        _, axis, factor, offset = (int(x) for x in entry)
        inner = 1
        for extent in extents[axis + 1:]:
            inner *= extent
        if inner <= 0 or factor <= 0:
            continue
        ratio = (inner + (factor + offset - inner % factor) % factor) / inner
    return ratio


class CopyMemory(BoundedMemory):
    """``copy_facts`` kept by structure: the block realize with its enclosing loop variables hashed
    together (loop variables mapped by position, so the same copy in another candidate, whose
    variables are other objects, hashes alike), and the loops' own description.

    Only copies inside a GPU kernel are remembered (and counted in ``asked`` and ``computed``): the
    facts of any other (a CPU schedule's cache copy) are its predicate and padding alone, which cost
    no more than the hash would."""

    def __init__(self, capacity: int = REMEMBERED_COPIES):
        super().__init__(capacity)

    def facts(self, realize, store, loops: Sequence, loop_vars: Sequence, own_start: int, align,
              warp_size: int = 32) -> CopyFacts:
        def compute() -> CopyFacts:
            return copy_facts(realize, store, loops, loop_vars, own_start, align, warp_size)

        if not in_gpu_kernel(loops):
            return compute()
        key = (int(tvm_ffi.structural_hash(tvm_ffi.convert([*loop_vars, realize]), map_free_vars=True)),
               tuple((loop.extent, loop.kind, loop.thread) for loop in loops), own_start, warp_size)
        return self.get(key, compute)


COPY_MEMORY = CopyMemory()
