"""Which way a GEMM block's B operand is stored, and the mma sketches that copy it as it is.

The tensor-core rule lays each operand's shared-memory tile out as its compute intrinsic indexes
it, and TVM's auto-tensorization matches a GEMM block to a compute whatever the block's layout, by
re-indexing. The mma family has computes for both B layouts at m16n8k16 (``mma_k16.py``): k-major
(``matmul``, a conv2d's HWIO weights) and n-major with k contiguous (``dense``, ``matmul_nt``: a
linear layer's weights). With the other layout's compute, the copy into shared memory transposes B,
8 elements a row apart: no cp.async, and VerifyGPUCode rejects it for most tilings.
``copying_b_as_stored`` keeps, of an instruction's sketches, those that copy B as it is stored where
the instruction has one; TVM's m16n8k8 has only the k-major compute and keeps its sketches.
"""

from __future__ import annotations

from typing import List, Optional

from tvm.tirx.analysis import undefined_vars

TRANS_B_SUFFIX = "_trans"
REDUCTION_ITER = 2  # tirx.IterVar.CommReduce


def compute_intrinsic(trace) -> Optional[str]:
    """The tensor intrinsic a trace's GEMM block computes with (``meta_schedule.auto_tensorize`` of a
    ``wmma_sync``/``mma_sync`` one), or None."""
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == "meta_schedule.auto_tensorize":
            value = str(inst.inputs[1])
            if value.startswith(("wmma_sync", "mma_sync")):
                return value
    return None


def mma_shape_of(intrinsic: Optional[str]) -> Optional[str]:
    """``m16n8k8`` or ``m16n8k16`` for an ``mma_sync`` intrinsic's name; None for another or None."""
    return intrinsic.split("_")[2] if intrinsic and intrinsic.startswith("mma_sync") else None


def b_is_k_contiguous(sch, block) -> Optional[bool]:
    """Whether ``block``'s B operand (its last read other than its output) is stored with a
    reduction axis innermost; None where the block does not read two operands or does not reduce."""
    stmt = sch.get(block)
    reduction = [v.var for v in stmt.iter_vars if int(v.iter_type) == REDUCTION_ITER]
    written = [region.source for region in stmt.writes]
    operands = [r for r in stmt.reads if not any(r.source.same_as(w) for w in written)]
    if len(operands) < 2 or not reduction:
        return None
    used = undefined_vars(operands[-1].region[-1].min, [])
    return any(var.same_as(r) for var in used for r in reduction)


def copying_b_as_stored(spaces: List, k_contiguous: Optional[bool]) -> List:
    """``spaces`` without the mma sketches whose compute transposes B on the way to shared memory,
    where a sketch of the same instruction does not; the rest as they are."""
    if k_contiguous is None:
        return spaces
    intrinsics = [compute_intrinsic(space.trace) for space in spaces]
    as_stored = {mma_shape_of(name) for name in intrinsics if _copies_as_stored(name, k_contiguous)}
    return [space for space, name in zip(spaces, intrinsics)
            if mma_shape_of(name) not in as_stored or _copies_as_stored(name, k_contiguous)]


def _copies_as_stored(intrinsic: Optional[str], k_contiguous: bool) -> bool:
    return mma_shape_of(intrinsic) is not None and intrinsic.endswith(TRANS_B_SUFFIX) == k_contiguous
