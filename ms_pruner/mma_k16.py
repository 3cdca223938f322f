"""mma.sync m16n8k16 intrinsics that TVM's pipelined tensor-core rule can take.

TVM 0.27's mma rule tensorizes with the ``mma_sync_m16n8k8_*`` intrinsics only: ``get_mma_intrin_group``'s
16x16 groups are named ``mma_f16f16f32`` and use ``warp`` fragments, which the rule does not treat as
mma (it checks the ``mma_sync`` prefix) and cannot lay out, so they give no tensorized sketch. An
m16n8k8 instruction does half the work of an m16n8k16 one, and on Hopper the tensor pipe does not
take it twice as often: back to back on an H200, m16n8k8 reached 477 TFLOP/s and m16n8k16 640
(docs/results/h200/mma_ceiling.json). WMMA's 16x16x16 compiles to m16n8k16, so the mma family
started a quarter below the family it should beat.

The intrinsics here keep the rule's fragment scopes (``m16n8k8.matrixA/B/C``, which TVM lowers to
registers by shape alone) and its tile shapes for the loads (A 32 rows, B 32 columns), with
16-deep k: an A load fills a 32x16 tile with two ``ldmatrix.x4`` (rows 0-15, then 16-31), a B load
a 16x32 tile with two transposed ones (columns 0-15, then 16-31). A thread's registers hold each
tile as one block of 16 values, ordered so that the four A registers and two B registers of one
m16n8k16 instruction are contiguous (the PTX ISA's fragment layouts: A a0-a3 = rows 0-7/8-15 of
k 0-7, then of k 8-15; B b0-b1 = k 0-7, k 8-15 of one 8-column slice). ``tests/test_mma_k16.py``
plays these loads and the instruction on every lane against a matrix product.

A GEMM whose B is stored n-major with k contiguous (``dense``, ``matmul_nt``: the weights of a linear
layer) has its own B load and computes (``_trans``): the rule lays the shared B tile out as the
compute's B is indexed, so with the plain ones it copies B transposed, 8 elements a row apart, which
is no cp.async (and which VerifyGPUCode rejects for most tilings). The ``_trans`` load keeps the tile
as global memory holds it (32 n rows of 16 k) and fills the same registers with untransposed
``ldmatrix``: the B fragment of mma.sync is k-major, which is what an n-major tile read row by row gives.
"""

from __future__ import annotations

import threading
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

WARP = 32
TILE = 32  # rows of an A load, columns of a B load (the rule's partition factors assume 32)
K = 16
VALUES_PER_TILE = TILE * K // WARP  # fp16 values a thread holds of one 32x16 (or 16x32) tile
A_SCOPE, B_SCOPE, C_SCOPE = "m16n8k8.matrixA", "m16n8k8.matrixB", "m16n8k8.matrixC"
LOAD_A = "mma_load_m16n8k16_f16_A_shared_dyn"
LOAD_B = "mma_load_m16n8k16_f16_B_shared_dyn"
LOAD_B_TRANS = "mma_load_m16n8k16_f16_B_trans_shared_dyn"
ACCUMULATORS = {"f16": "float16", "f32": "float32"}
_LOCK = threading.Lock()


def compute_name(acc: str, trans_b: bool = False) -> str:
    return f"mma_sync_m16n8k16_f16f16{acc}" + ("_trans" if trans_b else "")


INTRINSIC_NAMES = (LOAD_A, LOAD_B, LOAD_B_TRANS,
                   *(compute_name(acc, trans) for acc in ACCUMULATORS for trans in (False, True)))


def a_register(i, j, stride):
    """First register value (in fp16 values) of the A fragment whose tile starts at row ``i``, column
    ``j`` of a warp's A fragment buffer ``stride`` columns wide: 32x16 tiles row-major, 16 values
    each, the tile's rows 16-31 after its rows 0-15."""
    return ((i // TILE) * (stride // K) + j // K) * VALUES_PER_TILE + (i % TILE) // 16 * 8


def b_register(i, j, stride):
    """First register value of the B fragment whose k rows start at ``i`` and 8 columns at ``j``:
    16x32 tiles row-major, 16 values each, 4 for each 8-column slice."""
    return ((i // K) * (stride // TILE) + j // TILE) * VALUES_PER_TILE + (j % TILE) // 8 * 4


def b_trans_register(i, j, stride):
    """First register value of the B fragment whose 8 n rows start at ``i`` and k columns at ``j`` of
    an n-major buffer: 32x16 tiles row-major, 16 values each, 4 for each 8-row slice (the registers
    ``b_register`` gives the same slice of a k-major buffer)."""
    return ((i // TILE) * (stride // K) + j // K) * VALUES_PER_TILE + (i % TILE) // 8 * 4


def a_lane_address(lane, half, row_stride):
    """Shared-memory offset lane ``lane`` gives ``ldmatrix.x4`` for half ``half`` of a 32x16 A tile:
    matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)."""
    return (16 * half + lane % 16) * row_stride + (lane // 16) * 8


def b_lane_address(lane, half, row_stride):
    """Offset lane ``lane`` gives the transposed ``ldmatrix.x4`` for half ``half`` of a 16x32 B tile
    (rows k, columns n): matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)."""
    return (lane % 16) * row_stride + 16 * half + (lane // 16) * 8


def b_trans_lane_address(lane, half, row_stride):
    """Offset lane ``lane`` gives the untransposed ``ldmatrix.x4`` for half ``half`` of a 32x16
    n-major B tile: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)."""
    return (16 * half + 8 * (lane // 16) + lane % 8) * row_stride + (lane // 8) % 2 * 8


_LOADS = {  # operand -> (tile rows, tile columns, fragment scope, register, lane address, transposed)
    "A": (TILE, K, A_SCOPE, a_register, a_lane_address, False),
    "B": (K, TILE, B_SCOPE, b_register, b_lane_address, True),
    "B_trans": (TILE, K, B_SCOPE, b_trans_register, b_trans_lane_address, False),
}


def _load(operand: str):
    rows, cols, scope, register, address, transposed = _LOADS[operand]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        src = T.match_buffer(a, (rows, cols), "float16", align=64, offset_factor=1, scope="shared.dyn")
        dst = T.match_buffer(c, (rows, cols), "float16", align=64, offset_factor=1, scope=scope)
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:rows, 0:cols])
            for i, j in T.grid(rows, cols):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    dst[vi, vj] = src[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        src = T.match_buffer(a, (rows, cols), "float16", align=64, offset_factor=1, scope="shared.dyn",
                             strides=[s0, s1])
        d0 = T.int32()
        d1 = T.int32()
        dst = T.match_buffer(c, (rows, cols), "float16", align=64, offset_factor=1, scope=scope, strides=[d0, d1])
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:rows, 0:cols])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(transposed, 4, ".b16", dst.data, register(dst.elem_offset // d0, dst.elem_offset % d0, d0),
                                                 src.access_ptr("r"), address(tx, 0, s0), dtype="float16"))
                T.evaluate(T.ptx_legacy.ldmatrix(transposed, 4, ".b16", dst.data, register(dst.elem_offset // d0, dst.elem_offset % d0, d0) + 8,
                                                 src.access_ptr("r"), address(tx, 1, s0), dtype="float16"))

    return desc, impl


def _compute(out_dtype: str, trans_b: bool):
    # The accumulator is TVM's m16n8k8 fragment (an m16n8k16 one is the same), at TVM's register index.
    from tvm.s_tir.tensor_intrin.cuda import get_index_C  # lazy: ~23 s unless register_tensor_intrinsics imported it

    b_shape, b_register_of = ((8, K), b_trans_register) if trans_b else ((K, 8), b_register)

    def widened(value):
        return value if out_dtype == "float16" else T.Cast(out_dtype, value)

    def b_value(B, vj, vk):
        return widened(B[vj, vk] if trans_b else B[vk, vj])

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (16, K), "float16", align=64, offset_factor=1, scope=A_SCOPE)
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=1, scope=B_SCOPE)
        C = T.match_buffer(c, (16, 8), out_dtype, align=64, offset_factor=1, scope=C_SCOPE)
        with T.sblock("root"):
            T.reads(C[0:16, 0:8], A[0:16, 0:K], B[0:b_shape[0], 0:b_shape[1]])
            T.writes(C[0:16, 0:8])
            for i, j, k in T.grid(16, 8, K):
                with T.sblock("m16n8k16_sync"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + widened(A[vi, vk]) * b_value(B, vj, vk)

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a0 = T.int32()
        a1 = T.int32()
        A = T.match_buffer(a, (16, K), "float16", align=64, offset_factor=1, scope=A_SCOPE, strides=[a0, a1])
        b0 = T.int32()
        b1 = T.int32()
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=1, scope=B_SCOPE, strides=[b0, b1])
        c0 = T.int32()
        c1 = T.int32()
        C = T.match_buffer(c, (16, 8), out_dtype, align=64, offset_factor=1, scope=C_SCOPE, strides=[c0, c1])
        with T.sblock("root"):
            T.reads(C[0:16, 0:8], A[0:16, 0:K], B[0:b_shape[0], 0:b_shape[1]])
            T.writes(C[0:16, 0:8])
            T.evaluate(T.ptx_legacy.mma(
                "m16n8k16", "row", "col", "float16", "float16", out_dtype,
                A.data, a_register(A.elem_offset // a0, A.elem_offset % a0, a0),
                B.data, b_register_of(B.elem_offset // b0, B.elem_offset % b0, b0),
                C.data, get_index_C(C.elem_offset, c0),
                False, dtype=out_dtype))

    return desc, impl


def register_mma_k16_intrinsics() -> None:
    """Register the loads and computes once per process (init and store are TVM's m16n8k8 ones)."""
    with _LOCK:
        if TensorIntrin.get(LOAD_A, allow_missing=True) is not None:
            return
        TensorIntrin.register(LOAD_B, *_load("B"))
        TensorIntrin.register(LOAD_B_TRANS, *_load("B_trans"))
        for acc, dtype in ACCUMULATORS.items():
            for trans_b in (False, True):
                TensorIntrin.register(compute_name(acc, trans_b), *_compute(dtype, trans_b))
        TensorIntrin.register(LOAD_A, *_load("A"))

