"""What a warp does in one tensor-core or asynchronous-copy instruction, on every emulated warp.

``ldmatrix`` and ``mma.sync`` follow the PTX ISA's fragment layouts, lane by lane (the layouts are
tables of (row, column) per lane and register element, below). WMMA fragments are opaque in CUDA;
here a fragment is its tile, row-major, in its warp's slot. ``cp.async`` copies are read when issued
and land in shared memory when a ``cp.async.wait_group`` lets their group complete, so a kernel that
reads a stage before waiting for it reads what was there before (``AsyncCopies``); a guarded copy
whose guard fails stores its zeros at once, as TVM's predicated copy does.
"""

from __future__ import annotations

import dataclasses
from typing import List

import numpy as np

from .memory import WARP, EmulationFault, EmulationUnsupported, Pointer

_LANE = np.arange(WARP)[:, None]
_GROUP, _IN_GROUP = _LANE // 4, _LANE % 4


def _layout(rows, cols):
    return np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)


def _elements(count: int):
    return np.arange(count)[None, :]


# (row, column) of each lane's register elements: PTX ISA, "Matrix fragments for mma.m16n8k16 / k8".
_E8, _E4, _E2 = _elements(8), _elements(4), _elements(2)
A_K16 = _layout(_GROUP + 8 * ((_E8 // 2) % 2), 2 * _IN_GROUP + _E8 % 2 + 8 * (_E8 // 4))
A_K8 = _layout(_GROUP + 8 * (_E4 // 2), 2 * _IN_GROUP + _E4 % 2)
B_K16 = _layout(2 * _IN_GROUP + _E4 % 2 + 8 * (_E4 // 2), _GROUP + 0 * _E4)
B_K8 = _layout(2 * _IN_GROUP + _E2, _GROUP + 0 * _E2)
C_M16N8 = _layout(_GROUP + 8 * (_E4 // 2), 2 * _IN_GROUP + _E4 % 2)
MMA_SHAPES = {"m16n8k16": (16, A_K16, B_K16), "m16n8k8": (8, A_K8, B_K8)}


def per_warp(value, threads) -> np.ndarray:
    """Lane 0's ``value`` in each emulated warp (a warp-wide instruction's operand)."""
    return np.broadcast_to(np.asarray(value), (threads.count, 1)).reshape(threads.warps, WARP)[:, 0]


def registers(pointer: Pointer, element, count: int, mask=None):
    """Each thread's ``count`` consecutive ``element``s at ``pointer``: (threads, count)."""
    size = np.dtype(element).itemsize
    return pointer.memory.load(element, pointer.slot, pointer.offset + np.arange(count) * size, mask)


def set_registers(pointer: Pointer, element, values, mask=None) -> None:
    size = np.dtype(element).itemsize
    pointer.memory.store(element, pointer.slot, pointer.offset + np.arange(values.shape[-1]) * size, values, mask)


def ldmatrix(run, transposed: bool, count: int, destination: Pointer, source: Pointer) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].b16``: lanes 8m..8m+7 name the rows of matrix m,
    16 bytes each; lane t receives row t/4, columns 2(t%4) and 2(t%4)+1 of each (of its transpose)."""
    threads = run.threads
    naming = threads.lane < 8 * count
    rows = registers(source, np.float16, 8, naming if run.mask is None else naming & run.mask)
    matrices = rows.reshape(threads.warps, 4, 8, 8)[:, :count]
    pick = 2 * _IN_GROUP + np.arange(2)[None, :]
    row, col = (pick, _GROUP) if transposed else (_GROUP, pick)
    received = matrices[:, :, row, col]  # warps, count, lane, 2
    values = received.transpose(0, 2, 1, 3).reshape(threads.count, 2 * count)
    set_registers(destination, np.float16, values, run.mask)


def mma(run, shape: str, dtypes, a: Pointer, b: Pointer, c: Pointer) -> None:
    """``mma.sync.aligned.{shape}.row.col``: D = A B + C on each warp, in place of C."""
    if shape not in MMA_SHAPES:
        raise EmulationUnsupported(f"mma.sync {shape}")
    depth, a_layout, b_layout = MMA_SHAPES[shape]
    threads, accumulate = run.threads, dtypes[2]
    warps = threads.warps
    a_tile = np.zeros((warps, 16, depth), np.float32)
    a_tile[:, a_layout[0], a_layout[1]] = registers(a, dtypes[0], a_layout[0].shape[1]).reshape(warps, WARP, -1)
    b_tile = np.zeros((warps, depth, 8), np.float32)
    b_tile[:, b_layout[0], b_layout[1]] = registers(b, dtypes[1], b_layout[0].shape[1]).reshape(warps, WARP, -1)
    c_tile = np.zeros((warps, 16, 8), np.float32)
    c_tile[:, C_M16N8[0], C_M16N8[1]] = registers(c, accumulate, 4).reshape(warps, WARP, 4)
    product = np.matmul(a_tile, b_tile) + c_tile
    set_registers(c, accumulate, product[:, C_M16N8[0], C_M16N8[1]].reshape(threads.count, 4).astype(accumulate),
                  run.mask)


@dataclasses.dataclass(frozen=True)
class Fragment:
    """A WMMA fragment buffer: its tile's rows and columns and element type."""

    rows: int
    cols: int
    element: type

    @classmethod
    def of(cls, scope: str, m: int, n: int, k: int, element) -> "Fragment":
        rows, cols = {"wmma.matrix_a": (m, k), "wmma.matrix_b": (k, n), "wmma.accumulator": (m, n)}[scope]
        return cls(rows, cols, element)

    @property
    def size(self) -> int:
        return self.rows * self.cols


def _tile_offsets(run, pointer: Pointer, stride, layout: str, fragment: Fragment, size: int):
    """(slot, byte offsets) a warp's tile of ``fragment``'s shape occupies at ``pointer``."""
    threads = run.threads
    rows, cols = np.meshgrid(np.arange(fragment.rows), np.arange(fragment.cols), indexing="ij")
    elements = rows * stride[:, None, None] + cols if layout == "row_major" else cols * stride[:, None, None] + rows
    base = per_warp(pointer.offset, threads)[:, None, None]
    return per_warp(pointer.slot, threads)[:, None, None], base + elements * size


def _fragment_at(run, fragment_ptr: Pointer, fragment: Fragment, index):
    size = np.dtype(fragment.element).itemsize
    offsets = (per_warp(index, run.threads)[:, None] * fragment.size + np.arange(fragment.size)) * size
    base = per_warp(fragment_ptr.offset, run.threads)[:, None]
    return fragment_ptr.memory, np.arange(run.threads.warps)[:, None], base + offsets


def wmma_load(run, fragment_ptr: Pointer, fragment: Fragment, index, source: Pointer, stride, layout: str):
    slot, offsets = _tile_offsets(run, source, per_warp(stride, run.threads), layout, fragment,
                                  np.dtype(fragment.element).itemsize)
    tile = source.memory.load(fragment.element, slot, offsets).reshape(run.threads.warps, -1)
    memory, warp, where = _fragment_at(run, fragment_ptr, fragment, index)
    memory.store(fragment.element, warp, where, tile, _warp_mask(run))


def wmma_store(run, fragment_ptr: Pointer, fragment: Fragment, index, target: Pointer, stride, layout: str):
    memory, warp, where = _fragment_at(run, fragment_ptr, fragment, index)
    tile = memory.load(fragment.element, warp, where)
    slot, offsets = _tile_offsets(run, target, per_warp(stride, run.threads), layout, fragment,
                                  np.dtype(fragment.element).itemsize)
    active = _warp_mask(run)
    target.memory.store(fragment.element, slot, offsets, tile.reshape(offsets.shape),
                        None if active is None else active[:, :, None])


def wmma_fill(run, fragment_ptr: Pointer, fragment: Fragment, index, value) -> None:
    memory, warp, where = _fragment_at(run, fragment_ptr, fragment, index)
    memory.store(fragment.element, warp, where, per_warp(value, run.threads)[:, None], _warp_mask(run))


def wmma_mma(run, d, a, b, c) -> None:
    """``wmma::mma_sync``: each of d, a, b, c is (pointer, Fragment, index)."""
    tiles = []
    for pointer, fragment, index in (a, b, c):
        memory, warp, where = _fragment_at(run, pointer, fragment, index)
        tiles.append(memory.load(fragment.element, warp, where).astype(np.float32)
                     .reshape(-1, fragment.rows, fragment.cols))
    product = np.matmul(tiles[0], tiles[1]) + tiles[2]
    memory, warp, where = _fragment_at(run, d[0], d[1], d[2])
    memory.store(d[1].element, warp, where, product.reshape(where.shape).astype(d[1].element), _warp_mask(run))


SHUFFLES = ("tvm_warp_shuffle", "tvm_warp_shuffle_down", "tvm_warp_shuffle_up")


def shuffle(threads, kind: str, value, lane, width):
    """``__shfl_sync`` (``kind`` in SHUFFLES: ``_down``, ``_up``): each thread's ``value`` from the
    lane that ``lane`` names in its ``width``-lane segment of its warp (a lane index taken modulo
    ``width``; a delta that leaves the segment, or the block, gives the thread its own value, as CUDA
    does). Warps count from each block's first thread, as the hardware's do."""
    index = threads.index
    position = index % threads.per_block % WARP % width
    if kind == "tvm_warp_shuffle":
        source = np.mod(lane, width)
    else:
        source = position + lane if kind == "tvm_warp_shuffle_down" else position - lane
    target = np.where((source >= 0) & (source < width), index - position + source, index)
    target = np.where(target // threads.per_block == index // threads.per_block, target, index)
    values = np.asarray(value).reshape(1, 1) if np.ndim(value) == 0 else np.asarray(value)
    return np.broadcast_to(values, (threads.count, values.shape[-1]))[target[:, 0]]


def _warp_mask(run):
    """Which emulated warps run a warp-wide instruction (all lanes of a warp agree, or it faults)."""
    if run.mask is None:
        return None
    lanes = np.broadcast_to(run.mask, (run.threads.count, 1)).reshape(run.threads.warps, WARP)
    if np.any(lanes.any(axis=1) != lanes.all(axis=1)):
        raise EmulationFault("a warp-wide tensor-core instruction with part of its warp inactive")
    return lanes[:, :1]


@dataclasses.dataclass
class _Copy:
    memory: object
    slot: object
    offsets: np.ndarray
    data: np.ndarray
    mask: object


class AsyncCopies:
    """The launch's ``cp.async`` groups: issued, committed, completed at a wait."""

    def __init__(self):
        self.open: List[_Copy] = []
        self.committed: List[List[_Copy]] = []

    def issue(self, run, target: Pointer, source: Pointer, size: int, guard=None) -> None:
        """``size`` bytes from ``source`` to ``target``; where ``guard`` (a predicate) fails, zeros."""
        mask, active, lanes = run.mask, run.mask, np.arange(size)
        if guard is not None:
            guard = np.asarray(guard, dtype=bool)
            active = guard if mask is None else np.logical_and(mask, guard)
            zeroed = np.logical_not(guard) if mask is None else np.logical_and(mask, np.logical_not(guard))
            target.memory.store(np.uint8, target.slot, target.offset + lanes, np.uint8(0), zeroed)
        data = source.memory.load(np.uint8, source.slot, source.offset + lanes, active)
        self.open.append(_Copy(target.memory, target.slot, target.offset + lanes, data, active))

    def commit(self) -> None:
        self.committed.append(self.open)
        self.open = []

    def wait(self, pending: int) -> None:
        while len(self.committed) > pending:
            for copy in self.committed.pop(0):
                copy.memory.store(np.uint8, copy.slot, copy.offsets, copy.data, copy.mask)

    def drain(self) -> None:
        self.commit()
        self.wait(0)
