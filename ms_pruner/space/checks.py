"""A postprocessor that drops at sampling the mma tilings TVM cannot lower or compile.

The mma rule marks its global->shared copies ``permuted_layout`` (``g2s_A``/``g2s_B``): shared rows
are swizzled in groups of eight 16-byte chunks so that ldmatrix reads them without bank conflicts.
Two kinds of tiling fail after they were sampled, each found by building sampled candidates of the
4096^3 fp16 matmul with nvcc (``ms-pruner space --build``, docs/space.md):

- a tile row that is not a multiple of 32 elements: TVM's lowering stops ("Permuted SLayout ... is
  not supported since its second dimension is not divisible by 32"). The rule samples the row of A
  (the k tile) freely, so k tiles of 8 or 16 are common draws;
- a tile row longer than one pass of the block's threads (threads x 16 bytes) whose copy loop is
  unrolled whole (the unroll step at least its trips): each unrolled trip's row is a constant, the
  swizzle becomes a XOR of broadcast vectors, and TVM's CUDA code generator writes that 8-lane int32
  vector as ``make_longlong4`` with eight arguments, which nvcc rejects (rare among random draws;
  tests/test_space.py holds one).

The check reads the trace's copy blocks, thread binding and unroll step, before anything is lowered;
as a postprocessor of the space it applies to every sampler alike (MetaSchedule's evolutionary
search, Pruner's, a trace replayed from a database).
"""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.postproc import PyPostproc

from ..analysis.access import dtype_bytes

PERMUTED_LAYOUT_KEY = "permuted_layout"
VECTOR_BYTES_KEY = "vector_bytes"
UNROLL_KEY = "meta_schedule.unroll_explicit"
PERMUTED_ROW_ELEMENTS = 32
WARP_SIZE = 32


def _annotations(trace, key: str):
    return [inst for inst in trace.insts if inst.kind.name == "Annotate" and str(inst.attrs[0]) == key]


def _block_threads(sch) -> int:
    """Threads a block of an mma schedule: its threadIdx.y extent times a warp (``warp_execution``)."""
    threads = WARP_SIZE
    for inst in sch.trace.insts:
        if inst.kind.name == "Bind" and str(inst.attrs[0]) == "threadIdx.y":
            threads *= int(sch.get(inst.inputs[0]).extent)
    return threads


def _value(sch, rv) -> int:
    return int(sch.get(rv)) if not isinstance(rv, int) and hasattr(rv, "same_as") else int(rv)


def permuted_copies_lowerable(sch) -> bool:
    """Whether every permuted global->shared copy of ``sch`` (the blocks its trace marks) lowers and
    compiles: rows of a multiple of 32 elements, and no row longer than a pass of the block's
    threads in a copy loop unrolled whole."""
    trace = sch.trace
    copies = [inst.inputs[0] for inst in _annotations(trace, PERMUTED_LAYOUT_KEY) if str(inst.inputs[1]).startswith("g2s")]
    if not copies:
        return True
    widths = [(inst.inputs[0], int(inst.inputs[1])) for inst in _annotations(trace, VECTOR_BYTES_KEY)]
    unroll = max((_value(sch, inst.inputs[1]) for inst in _annotations(trace, UNROLL_KEY)), default=0)
    threads = _block_threads(sch)
    for block_rv in copies:
        region = sch.get(block_rv).writes[0]
        extents = [r.extent for r in region.region]
        if not all(hasattr(e, "value") for e in extents):
            return False
        row, elements = int(extents[-1].value), math.prod(int(e.value) for e in extents)
        if row % PERMUTED_ROW_ELEMENTS:
            return False
        width = next((w for rv, w in widths if rv.same_as(block_rv)), 16)
        lanes = max(1, int(width // dtype_bytes(region.source.dtype)))
        per_pass = threads * lanes
        if row > per_pass and unroll >= -(-elements // per_pass):
            return False
    return True


@derived_object
class PermutedLayoutCheck(PyPostproc):
    """Rejects a schedule whose permuted shared layout TVM cannot lower or compile (``permuted_copies_lowerable``)."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        try:
            return permuted_copies_lowerable(sch)
        except Exception:  # pylint: disable=broad-except
            return False  # a marked block the schedule no longer holds: not a schedule TVM lowers

    def clone(self):
        return PermutedLayoutCheck()
