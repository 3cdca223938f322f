"""A postprocessor that drops at sampling the mma tilings TVM cannot lower.

The mma rule marks its global->shared copies ``permuted_layout`` (``g2s_A``/``g2s_B``): shared rows
are swizzled in groups of eight 16-byte chunks so that ldmatrix reads them without bank conflicts.
A tile row that is not a multiple of 32 elements fails after it was sampled: TVM's lowering stops
("Permuted SLayout ... is not supported since its second dimension is not divisible by 32"). The
rule samples the row of A (the k tile) freely, so k tiles of 8 or 16 are common draws; they were
found by building sampled candidates of the 4096^3 fp16 matmul with nvcc (``ms-pruner space
--build``, docs/space.md).

A second kind, rows longer than a pass of the block's threads in a copy loop unrolled whole, once
left 8-lane int32 vectors that CUDA code generation wrote as code nvcc rejects; the builder's CUDA
source fix and chunked copies (docs/builder.md) compile those now, so the check lets them through.

A third: TVM lays an mma B fragment out in blocks of 32 columns (``TransformMmaBufferLayout``: "Check
failed: dim0 % 8 == 0 && dim1 % 32 == 0"). A ``_trans`` compute's B fragment (``mma_k16.py``) is
stored n-major, its columns the innermost k tile times 16, so that tile must be even.

The check reads the trace before anything is lowered; as a postprocessor of the space
it applies to every sampler alike (MetaSchedule's evolutionary search, Pruner's, a trace replayed
from a database).
"""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.postproc import PyPostproc

from ..mma_k16 import K as MMA_K
from .operand_layout import TRANS_B_SUFFIX, compute_intrinsic, mma_shape_of

PERMUTED_LAYOUT_KEY = "permuted_layout"
PERMUTED_ROW_ELEMENTS = 32
B_FRAGMENT_COLUMNS = 32  # TransformMmaBufferLayout's block of an m16n8k8.matrixB buffer's last axis


def _permuted_copies(trace):
    """The block random variables of the trace's permuted global->shared copies."""
    return [inst.inputs[0] for inst in trace.insts
            if inst.kind.name == "Annotate" and str(inst.attrs[0]) == PERMUTED_LAYOUT_KEY
            and str(inst.inputs[1]).startswith("g2s")]


def permuted_copies_lowerable(sch) -> bool:
    """Whether TVM lowers every permuted global->shared copy of ``sch`` (the blocks its trace marks):
    each copied row a constant multiple of 32 elements."""
    for block_rv in _permuted_copies(sch.trace):
        extents = [r.extent for r in sch.get(block_rv).writes[0].region]
        if not all(hasattr(e, "value") for e in extents) or int(extents[-1].value) % PERMUTED_ROW_ELEMENTS:
            return False
    return True


def fragments_lowerable(trace) -> bool:
    """Whether TVM lays out the trace's n-major mma B fragments: the innermost factor of the mma
    rule's reduction split (its one ``SamplePerfectTile``; i and j are partitioned) times the
    instruction's k is a multiple of 32. Traces of another compute pass, WMMA's ``_trans`` among them:
    its fragments have no such layout, and every split of that rule is a ``SamplePerfectTile``."""
    compute = compute_intrinsic(trace)
    if mma_shape_of(compute) is None or not compute.endswith(TRANS_B_SUFFIX):
        return True
    split = next((inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile" and inst in trace.decisions), None)
    return split is None or int(trace.decisions[split][-1]) * MMA_K % B_FRAGMENT_COLUMNS == 0


@derived_object
class PermutedLayoutCheck(PyPostproc):
    """Rejects a schedule whose permuted shared layout or fragments TVM cannot lower
    (``permuted_copies_lowerable``, ``fragments_lowerable``)."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        try:
            return permuted_copies_lowerable(sch) and fragments_lowerable(sch.trace)
        except Exception:  # pylint: disable=broad-except
            return False  # a marked block the schedule no longer holds: not a schedule TVM lowers

    def clone(self):
        return PermutedLayoutCheck()
