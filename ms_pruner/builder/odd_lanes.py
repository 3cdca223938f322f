"""Vector loops of an odd number of 16-bit lanes, unrolled before lowering.

The WMMA rule samples 1-4 lanes a thread for the write-back of its fp32 accumulators. Where the
result leaves the GEMM as fp16 after an epilogue (Relax's mixed precision casts a Linear layer's
product to fp16 before adding its bias: BERT's ``fused_matmul_cast_add`` tasks), 3 lanes make a
3-lane fp16 vector, and TVM's CUDA code generation stops ("Only support an even number of lanes for
half type"): a WMMA pick of a seeded cold round of such a task failed so
(``scripts/bench_cold_round.py --model bert-layer``). Such a loop is unrolled instead: the same
stores, an element each.
"""

from __future__ import annotations

from typing import Optional

import tvm_ffi
from tvm import tirx

from .tir_rebuild import accessed_buffers, with_rewritten_funcs

HALF_DTYPES = ("float16", "bfloat16")


def unroll_odd_half_vectors(mod):
    """``mod`` with each vectorized loop of an odd extent over 16-bit floats unrolled; ``mod``
    itself where there is none."""
    return with_rewritten_funcs(mod, _unrolled_func)


def _odd_half_vector(loop) -> bool:
    if loop.kind != tirx.ForKind.VECTORIZED or not isinstance(loop.extent, tirx.IntImm):
        return False
    if int(loop.extent) % 2 == 0 or int(loop.extent) == 1:
        return False
    stored, loaded = accessed_buffers(loop.body)
    return any(str(buffer.dtype) in HALF_DTYPES for buffer in stored + loaded)


def _unrolled_func(func) -> Optional[tirx.PrimFunc]:
    found = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda loop: found.append(_odd_half_vector(loop)))])
    if not any(found):
        return None

    def on_loop(loop, mutator):
        body = mutator.mutate(loop.body)
        kind = tirx.ForKind.UNROLLED if _odd_half_vector(loop) else loop.kind
        return tirx.For(loop.loop_var, loop.min, loop.extent, kind, body, loop.thread_binding, loop.annotations)

    return func.with_body(tvm_ffi.structural_mutate(func.body, [(tirx.For, on_loop)]))
