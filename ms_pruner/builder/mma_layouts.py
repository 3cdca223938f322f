"""The two index maps TVM's mma lowering looks up by name, registered without ``tensor_intrin``.

``TransformMmaBufferLayout`` (TVM's s_tir/transform/transform_mma_buffer_layout.cc) rewrites the mma
rule's fragment buffers through global functions that ``tvm.s_tir.tensor_intrin.cuda`` registers
when it is imported. The builder's workers never import that module (~23 s a fresh worker:
worker.py), so every mma candidate failed there with "Check failed: (index_map_func.has_value())"
(the H200 run of 2026-11-27: all 27 stock mma candidates of 256), while it built in any process
that had imported the intrinsics (the CPU checks of docs/space.md). The layouts are those of the
PTX ISA's mma.m16n8k8 fragments; they must equal TVM's, which tests/test_builder.py checks on every
index of a tile.
"""

from __future__ import annotations

from typing import Callable, Tuple

import tvm_ffi
from tvm.runtime import convert

LDMATRIX_LAYOUT = "tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout"
ACCUMULATOR_LAYOUT = "tirx.index_map_m16n8k8.matrixC"


def ldmatrix_position(i, j) -> Tuple:
    """(thread, register value) holding element (i, j) of a 16x16 fp16 tile that ldmatrix.x4 loads
    across a warp: 8 values in each of 32 threads."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + (i // 8) * 2 + j % 2


def accumulator_position(i, j) -> Tuple:
    """The 4-d position of accumulator element (i, j) of a 16x16 tile held as two m16n8 fragments."""
    return (i // 8) // 2, j // 8, (i // 8) % 2, j % 2


def register_mma_layouts() -> None:
    """Register both index maps where nothing has (a process that imported ``tensor_intrin`` keeps
    TVM's own)."""
    for name, position in ((LDMATRIX_LAYOUT, ldmatrix_position), (ACCUMULATOR_LAYOUT, accumulator_position)):
        if tvm_ffi.get_global_func(name, allow_missing=True) is None:
            tvm_ffi.register_global_func(name, _index_map(position))


def _index_map(position: Callable) -> Callable:
    def index_map(indices):
        return convert(list(position(indices[0], indices[1])))

    return index_map
