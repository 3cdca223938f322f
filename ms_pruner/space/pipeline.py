"""The mma rule's sketches at several software-pipeline depths.

TVM's pipelined tensor-core rule annotates the outer reduction loop with one fixed schedule of
stages: the global->shared copies (cp.async) at stage 0, the first fragment loads of a tile at
stage 1 and its MMAs at stage 2, i.e. three tiles in flight and three copies of each operand tile
in shared memory. The best depth depends on the tile, the GPU's memory latency and how much
shared memory is left for other blocks (CUTLASS ships 2 to 5 stages for Ampere and Hopper), and an
annotation's value cannot be a sampled decision, so ``PipelineDepths`` returns each sketch once
per depth: ``stages(d)`` puts the fragment loads at stage d-2 and the MMAs at d-1, keeping TVM's
order of the five statements of the loop body (the two copies, the inner pipeline's prologue,
body and epilogue), so d = 3 is TVM's own annotation. With d = 2 the fragment loads of a tile
share a stage with its MMAs, so they are ordered before them.

Where the rule cannot tensorize a block it falls back to TVM's CUDA-core tiling, or leaves it to
the CUDA-core tiling rule after it; in a union with the WMMA family (``only_pipelined``) a reduction
block the rule did not pipeline drops the sketch, since the WMMA family's space holds the same one.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
from tvm.s_tir.schedule import ScheduleError

from .operand_layout import REDUCTION_ITER, b_is_k_contiguous, copying_b_as_stored

STAGE_KEY = "software_pipeline_stage"
ORDER_KEY = "software_pipeline_order"
ASYNC_KEY = "software_pipeline_async_stages"
DEPTHS = (2, 3, 4)


def stages(depth: int) -> Tuple[List[int], List[int]]:
    """(software_pipeline_stage, software_pipeline_order) of the outer loop for ``depth`` shared-memory stages."""
    if depth < 2:
        raise ValueError(f"a pipeline needs at least 2 stages, not {depth}")
    if depth == 2:
        return [0, 0, 1, 1, 1], [0, 1, 2, 3, 4]
    return [0, 0, depth - 2, depth - 1, depth - 1], [0, 1, 3, 2, 4]


def _outer_loop_annotations(trace) -> Tuple[Optional[object], Optional[list]]:
    """(loop RV, its last stage annotation) of the loop that carries the async stages; (None, None) if none."""
    async_loops = {id(inst.inputs[0]): inst.inputs[0] for inst in trace.insts
                   if inst.kind.name == "Annotate" and str(inst.attrs[0]) == ASYNC_KEY}
    loop, value = None, None
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == STAGE_KEY:
            target = inst.inputs[0]
            if any(target.same_as(candidate) for candidate in async_loops.values()):
                loop, value = target, [int(v) for v in inst.inputs[1]]
    return loop, value


def outer_stage_annotation(trace) -> Optional[List[int]]:
    """The stages of a trace's pipelined outer loop (the one with asynchronous copies), or None."""
    return _outer_loop_annotations(trace)[1]


@derived_object
class PipelineDepths(PyScheduleRule):
    """``inner``'s design spaces, each at every depth of ``depths`` (its own depth included once)."""

    def __init__(self, inner, depths: Sequence[int] = DEPTHS, only_pipelined: bool = False):
        super().__init__()
        self.inner = inner
        self.only_pipelined = only_pipelined
        self.depths = tuple(sorted(set(int(d) for d in depths)))
        for depth in self.depths:
            stages(depth)

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def apply(self, sch, block) -> list:
        drop_unpipelined = self.only_pipelined and is_reduction(sch, block)
        k_contiguous = b_is_k_contiguous(sch, block)
        spaces = []
        for space in copying_b_as_stored(self._inner_spaces(sch, block), k_contiguous):
            variants = self._at_depths(space)
            if drop_unpipelined:
                variants = [v for v in variants if outer_stage_annotation(v.trace)]
            spaces.extend(variants)
        return spaces

    def _inner_spaces(self, sch, block) -> list:
        """``inner``'s spaces for ``block``; ``sch`` as it is where the rule's tiling raises a
        ScheduleError. TVM 0.27's mma rule does on a GEMM whose M is 16 or whose N is 1000 (a split
        factor of -1 in its fixed warp tiling: apache/tvm #14935's kind of shape), which would end
        the whole design space, and with it tuning on the default space; the block is then left to
        the CUDA-core rule after it, or in a union to the WMMA family."""
        try:
            return list(self.inner.apply(sch, block))
        except ScheduleError:
            return [sch]

    def _at_depths(self, space) -> list:
        """``space`` at each depth of ``depths`` (itself where it is not pipelined, or at its own depth)."""
        loop, current = _outer_loop_annotations(space.trace)
        if loop is None:
            return [space]
        variants = []
        for depth in self.depths:
            if depth == max(current) + 1:
                variants.append(space)
                continue
            variant = space.copy()
            for key, value in zip((STAGE_KEY, ORDER_KEY), stages(depth)):
                variant.unannotate(loop, key)  # annotate keeps a key's first value
                variant.annotate(loop, key, value)
            variants.append(variant)
        return variants

    def clone(self):
        return PipelineDepths(self.inner.clone(), self.depths, self.only_pipelined)


def is_reduction(sch, block) -> bool:
    """Whether ``block`` reduces (the blocks the tiling rules tile)."""
    return any(int(var.iter_type) == REDUCTION_ITER for var in sch.get(block).iter_vars)
