"""A fused epilogue (bias, activation) for the mma rule's kernels.

TVM's mma rule stores its accumulator fragments with ``write_at``: an ``auto_copy`` block that TVM's
MemHammer lowers (``LowerAutoCopy``) as a plain copy only. AutoInline then inlines the GEMM's
elementwise consumer into that copy (``D = C + bias``), and every candidate fails to lower
("Multiple buffer read"): of 680 draws of ``dense_bias`` none was valid
(docs/results/cpu/space/mma_dense_bias_h100.json.gz).
Left alone, the consumer is bound by RewriteUnboundBlock with the target's 1024 threads a block, and
that breaks the GEMM's kernel: MemHammer takes the thread extents of the whole function for the
GEMM's copies ("All loops that are bound to threadIdx.x should have the same extent").
A copy into shared memory instead of global is lowered with every lane copying the whole warp tile
from registers only the owner holds, so the epilogue cannot read the fragments in the GEMM's kernel.

``EpilogueAfterFragmentStore`` keeps the consumer a kernel of its own with the warp's 32 threads a
block (what MemHammer then reads is the GEMM's own width), each thread one 4-element vector: the
GEMM writes its fp32 (fp16) result, the epilogue reads it back with the bias and writes the output.
Any consumer after it (a ReLU) is inlined into it as AutoInline does. Blocks that do not read an mma
fragment store, and reductions that do, are left to AutoInline.
"""

from __future__ import annotations

from typing import Optional

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
from tvm.s_tir.schedule import ScheduleError

from ..mma_k16 import C_SCOPE as ACCUMULATOR_SCOPE
from .pipeline import is_reduction

WARP_THREADS = 32
VECTOR_LANES = 4  # an mma-tiled output is a multiple of 16 x 8 elements, so of 32 x 4


def fragment_store(sch, block) -> Optional[object]:
    """The ``auto_copy`` block storing mma accumulator fragments that ``block`` consumes, or None."""
    if sch.get_sref(block).parent is None:
        return None
    for producer in sch.get_producers(block):
        stmt = sch.get(producer)
        if "auto_copy" in stmt.annotations and any(r.source.scope() == ACCUMULATOR_SCOPE for r in stmt.reads):
            return producer
    return None


def epilogue_kernel(sch, block) -> None:
    """Leave ``block`` a kernel of its own, bound with the GEMM kernel's warp width of threads."""
    loops = sch.get_loops(block)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    blocks, lanes, vector = sch.split(fused, [None, WARP_THREADS, VECTOR_LANES])
    sch.bind(blocks, "blockIdx.x")
    sch.bind(lanes, "threadIdx.x")
    sch.vectorize(vector)


@derived_object
class EpilogueAfterFragmentStore(PyScheduleRule):
    """``inline`` (TVM's AutoInline) but for a GEMM's first consumer after an mma fragment store."""

    def __init__(self, inline):
        super().__init__()
        self.inline = inline

    def _initialize_with_tune_context(self, context) -> None:
        self.inline._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def apply(self, sch, block) -> list:
        if is_reduction(sch, block) or fragment_store(sch, block) is None:
            return list(self.inline.apply(sch, block))
        kernel = sch.copy()
        try:
            epilogue_kernel(kernel, block)
        except ScheduleError:  # a consumer this binding does not fit: left to AutoInline (no valid mma draw)
            return list(self.inline.apply(sch, block))
        return [kernel]

    def clone(self):
        return EpilogueAfterFragmentStore(self.inline.clone())
