"""What the analyzer sees of a schedule's tiling: kernel geometry and operand fetch widths.

Schedules of one geometry differ in what the analyzer barely tells apart (fetch widths, unroll
depth, write-back width, the loop order inside a thread); the search groups them by it.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .features import CopyStream, KernelFeatures, is_shared


def operand_fetches(features: KernelFeatures) -> List[CopyStream]:
    """The kernel's global->shared copies (the operand tiles of each main-loop trip), in order."""
    return [c for c in features.copies if c.src_scope == "global" and is_shared(c.dst_scope)]


NARROW_FETCH_BYTES = 4
MMA_SYNC_N = 8  # an mma.sync fragment is m16n8; WMMA's are 16 wide


def operand_fetch_bytes(features: Sequence[KernelFeatures]) -> tuple:
    """Bytes each thread moves per instruction in each operand fetch of each kernel, in order."""
    return tuple(int(c.vector_lanes * c.elem_bytes) for f in features for c in operand_fetches(f))


def has_narrow_fetch(features: Sequence[KernelFeatures]) -> bool:
    """Whether an operand fetch moves ``NARROW_FETCH_BYTES`` or fewer per thread and instruction: on
    the H100 database's best tiling such fetches measured 7-84% slower, where the analyzer sees a
    few percent at most (docs/search.md)."""
    return any(width <= NARROW_FETCH_BYTES for width in operand_fetch_bytes(features))


def kernel_geometry(features: Sequence[KernelFeatures]) -> Optional[tuple]:
    """What the analyzer sees of a schedule's tiling, per kernel: grid, threads, accumulator fragments
    per warp, main-loop trips and the bytes each operand tile brings to shared memory per trip, and
    for an mma.sync kernel its instruction (m16n8k8 and m16n8k16 twins share the rest).

    Schedules of one geometry differ only in fetch widths, unroll depth, write-back width or the
    loop order inside a thread, which the analyzer barely tells apart (the search spreads a cold
    batch over geometries for that reason). None without GPU kernels.
    """
    if not features:
        return None
    key = []
    for f in features:
        block_trips = max(1, f.grid) * max(1, f.main_loop_trips)
        tiles = tuple(round(c.bytes_total / block_trips) for c in operand_fetches(f))
        shape = (f"m{f.mma_m}n{f.mma_n}k{f.mma_k}",) if f.mma_n == MMA_SYNC_N else ()
        key.append((f.grid, f.threads_per_block, f.acc_fragments_per_warp, f.main_loop_trips, tiles, *shape))
    return tuple(key)


def geometry_name(geometry: Optional[tuple]) -> Optional[str]:
    if geometry is None:
        return None
    return "; ".join(f"grid {g} x {t} thr, {f:g} acc frags, {trips} trips, operand tiles {'+'.join(map(str, tiles))} B"
                     + "".join(f", {shape}" for shape in rest)
                     for g, t, f, trips, tiles, *rest in geometry)
