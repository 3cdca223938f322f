"""Per-kernel quantities derived from the block walk: launch shape, resources, work and traffic.

Everything is counted over the whole launch unless the name says ``per_block``/``per_warp``/
``per_thread``. Tensor-core blocks run per warp (their loop nests have no threadIdx.x); copies
run per thread; a block's *own* loops (those enclosing only it) span the tile it moves.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Tuple

from ..builder.parity_unroll import parity_loops_unrolled
from .pipeline import fragments_indexed_at_run_time, pipeline_shape, unrolled_whole
from .shared_allocation import auto_copy_staging, block_shared_bytes
from .tir_walk import FRAGMENT_LOADS, FRAGMENT_STORES, MMA_INTRINSICS, BlockInfo, ProgramInfo

BASE_REGISTERS = 24.0  # indices, pointers and loop counters of a tiled kernel
# A software-pipelined kernel's further registers: the shared addresses of each stage's copies and
# ldmatrix loads and the stage counters. Set on sampled mma candidates of the 4096^3 matmul for
# the H100 (seed 0); the spill call then matched ptxas on those and on 32 A100 candidates drawn after
# (docs/analyzer.md, section 2).
PIPELINED_EXTRA_REGISTERS = 24.0


def is_shared(scope: str) -> bool:
    return scope.startswith("shared")


def is_fragment(scope: str) -> bool:
    return scope.startswith("wmma.") or scope.startswith("m16n8k8.") or scope == "warp"


@dataclasses.dataclass
class CopyStream:
    """One data movement block: where from, where to, how wide, how often."""

    name: str
    src_scope: str
    dst_scope: str
    bytes_total: float
    elem_bytes: float
    vector_lanes: int
    warp_instructions: float  # over the launch
    serial_iters: int  # non-thread, non-vector own loop trips per thread (per tile)
    unrolled: bool
    sector_efficiency: float  # useful bytes / bytes of the 32-byte sectors a warp request fetches
    lines_per_request: float  # 128-byte lines one warp request spans (L1 tag lookups)
    shared_wavefronts_per_request: float  # shared-memory passes one warp request needs (banks)
    address_divisions: int = 0  # divisions by non-power-of-two constants per request (im2col indices)
    outer_trips: int = 1  # serial trips around the copy: how many times one block runs it
    synchronous: bool = False  # a global->shared copy that cannot be a cp.async (a gathered swizzle, swizzle.py)


@dataclasses.dataclass
class KernelFeatures:
    """What the analyzer knows about one kernel launch."""

    grid: int
    threads_per_block: int
    warps_per_block: int
    smem_per_block: float
    regs_per_thread: float
    mma_flops: float
    mma_count: float
    mma_m: int
    mma_n: int
    mma_k: int
    acc_dtype_bytes: float
    cuda_core_flops: float
    acc_fragments_per_warp: float
    operand_fragments_per_step: float
    global_read_bytes: float
    global_write_bytes: float
    direct_global_bytes: float  # global traffic of blocks that compute straight from/to global
    smem_read_bytes: float
    smem_write_bytes: float
    copies: List[CopyStream]
    main_loop_trips: int  # sequential trips of the outermost loop carrying the shared-memory loads
    unroll_max_step: int
    pipelined: bool
    global_buffer_bytes: float  # size of every global buffer the kernel touches, once
    # Shared-memory bytes a block by buffer: the main loop's staged inputs, and outputs staged after
    # it (the two sets do not live at once: smem_per_block is the larger sum).
    operand_tiles: Dict[str, float] = dataclasses.field(default_factory=dict)
    staging_tiles: Dict[str, float] = dataclasses.field(default_factory=dict)
    pipeline_stages: int = 1  # copies of each operand tile a software pipeline keeps in flight (pipeline_shape)
    local_operand_bytes: float = 0.0  # operand fragment bytes a warp-trip keeps in local memory (fragments_indexed_at_run_time)
    # Registers with both fragment copies held, where the builder may unroll the parity loop (gpu_model.as_built).
    parity_unrolled_regs: float = 0.0
    parity_unrolled: bool = False  # the builder unrolls it: the fragments stay in registers
    epilogue_inputs: int = 0  # global inputs (a bias) a fused mma epilogue loads in this kernel (_fused_write_back)


def _kernel_groups(program: ProgramInfo) -> Dict[int, List[BlockInfo]]:
    groups: Dict[int, List[BlockInfo]] = {}
    for block in program.blocks:
        groups.setdefault(block.kernel, []).append(block)
    return groups


def _threads(block: BlockInfo, warp_size: int) -> int:
    per_block = block.thread_extent("threadIdx")
    if block.warp_level and block.thread_extent("threadIdx.x") == 1:
        per_block *= warp_size
    return per_block


def _serial_trips(block: BlockInfo) -> int:
    trips = 1
    for loop in block.loops[block.own_start:]:
        if loop.thread is None and loop.kind != "vectorized":
            trips *= loop.extent
    return trips


def _copy_stream(block: BlockInfo, src, dst, warp_size: int, block_threads: int = 1) -> CopyStream:
    if block.auto_copy_lanes:
        return _auto_copy_stream(block, src, dst, warp_size, block_threads)
    lanes = block.vector_lanes
    threads = max(1, block.executions // max(lanes, 1))
    access = block.access
    bytes_total = block.executions * dst.elements * dst.dtype_bytes
    if access is not None:
        global_elem = src.dtype_bytes if src.scope == "global" else dst.dtype_bytes
        requests = block.executions * global_elem / access.useful_bytes
        efficiency = access.useful_bytes / (access.global_sectors * 32.0)
        lines, wavefronts = access.global_lines, access.shared_wavefronts
    else:
        requests = threads / warp_size
        efficiency, lines, wavefronts = 1.0, max(1.0, warp_size * lanes * dst.dtype_bytes / 128.0), 1.0
    return CopyStream(
        name=block.name,
        src_scope=src.scope,
        dst_scope=dst.scope,
        bytes_total=bytes_total,
        elem_bytes=dst.dtype_bytes,
        vector_lanes=lanes,
        warp_instructions=requests,
        serial_iters=_serial_trips(block),
        unrolled=any(loop.unroll_max_step >= _serial_trips(block) > 1 for loop in block.loops) or any(
            loop.kind == "unrolled" for loop in block.loops[block.own_start:]
        ),
        sector_efficiency=min(1.0, efficiency),
        lines_per_request=lines,
        shared_wavefronts_per_request=wavefronts,
        address_divisions=block.address_divisions,
        outer_trips=_outer_serial_trips(block),
    )


def _auto_copy_stream(block: BlockInfo, src, dst, warp_size: int, block_threads: int) -> CopyStream:
    """A copy TVM lowers for all the block's threads (``auto_copy``): each thread moves ``lanes``
    contiguous elements at a time, so a warp request spans whole 128-byte lines; into the mma rule's
    permuted layout and out of its accumulators the shared side is free of bank conflicts. A gathered
    permuted copy (swizzle.py) is synchronous, and one element a request where its load is guarded.
    A transposed one (copy_lanes.lane_stride) moves one element a thread, neighbouring threads
    ``source_stride`` elements apart in global memory: a sector, a line at most, each."""
    lanes, elem = block.auto_copy_lanes, dst.dtype_bytes
    bytes_total = block.executions * dst.elements * elem
    tile_trips = max(1, -(-dst.elements // max(1, block_threads * lanes)))
    element_trips = tile_trips
    if block.gathered and block.guarded:
        lanes, element_trips = 1, tile_trips * lanes
    per_request = lanes * elem * warp_size
    spread = elem * block.source_stride * warp_size  # bytes between a request's first and last element
    efficiency = min(1.0, elem / min(32.0, elem * block.source_stride))
    return CopyStream(
        name=block.name, src_scope=src.scope, dst_scope=dst.scope, bytes_total=bytes_total, elem_bytes=elem,
        vector_lanes=lanes, warp_instructions=bytes_total / per_request, serial_iters=element_trips,
        unrolled=any(loop.unroll_max_step >= tile_trips for loop in block.loops),
        sector_efficiency=efficiency,
        lines_per_request=min(float(warp_size), max(1.0, max(per_request, spread) / 128.0)),
        shared_wavefronts_per_request=max(1.0, per_request / 128.0), outer_trips=_outer_serial_trips(block),
        address_divisions=block.address_divisions, synchronous=block.gathered,
    )


@dataclasses.dataclass
class _KernelTally:
    """Running sums over one kernel's blocks, in block order (``kernel_features``)."""

    warp_size: int
    threads: int
    warps: int
    versions: int  # copies of each operand tile a software pipeline keeps (pipeline_shape)
    operand_tiles: Dict[str, float] = dataclasses.field(default_factory=dict)  # staged inputs of the main loop
    staging_tiles: Dict[str, float] = dataclasses.field(default_factory=dict)  # outputs staged after it
    copies: List[CopyStream] = dataclasses.field(default_factory=list)
    touched: set = dataclasses.field(default_factory=set)  # global buffers
    frags_by_side: Dict[str, float] = dataclasses.field(default_factory=dict)
    mma_flops: float = 0.0
    mma_count: float = 0.0
    cuda_flops: float = 0.0
    mma_shape: Tuple[int, int, int] = (0, 0, 0)
    acc_bytes: float = 4.0
    acc_frags: float = 0.0
    operand_frags: float = 0.0
    g_read: float = 0.0
    g_write: float = 0.0
    s_read: float = 0.0
    s_write: float = 0.0
    direct: float = 0.0
    main_trips: int = 1
    frag_bytes: float = 512.0
    operand_bytes: float = 0.0  # fragment bytes a warp loads in one trip of the fragment loop
    epilogue_inputs: int = 0

    def add(self, block: BlockInfo) -> None:
        for access in block.reads + block.writes:
            if access.scope == "global":
                self.touched.add(access.buffer)
        names = block.intrinsics
        if any(n in MMA_INTRINSICS for n in names):
            self._mma(block)
        elif block.is_init and any(is_fragment(w.scope) for w in block.writes):
            self.acc_frags += block.own_extent
        elif any(n in FRAGMENT_LOADS for n in names):
            self._fragment_load(block)
        elif any(n in FRAGMENT_STORES for n in names):
            self._fragment_store(block.writes[0], block)
        elif block.writes:
            dst = block.writes[0]
            srcs = [r for r in block.reads if r.buffer != dst.buffer]
            fragments = [r for r in srcs if is_fragment(r.scope)]
            if dst.scope == "global" and fragments and not block.auto_copy_lanes:
                self._fused_write_back(block, fragments[0], [r for r in srcs if r is not fragments[0]], dst)
                return
            if block.float_ops and not is_shared(dst.scope):
                self.cuda_flops += block.executions * block.float_ops
            if srcs and block.float_ops == 0 and len(srcs) == 1:
                self._copy(block, srcs[0], dst)
            else:
                self._direct(block, srcs, dst)

    def _mma(self, block: BlockInfo) -> None:
        a, c = block.reads[1], block.writes[0]
        m, n = c.shape[-2], c.shape[-1]
        self.mma_shape = (m, n, a.elements // max(1, m))
        m, n, k = self.mma_shape
        self.acc_bytes = c.dtype_bytes
        self.mma_count += block.executions
        self.mma_flops += block.executions * 2.0 * m * n * k

    def _fragment_load(self, block: BlockInfo) -> None:
        self.s_read += block.executions * block.reads[0].elements * block.reads[0].dtype_bytes
        self.operand_frags += block.own_extent
        side = "b" if block.writes[0].scope.endswith(("_b", "B")) else "a"
        self.frags_by_side[side] = self.frags_by_side.get(side, 0.0) + block.own_extent
        self.frag_bytes = block.writes[0].elements * block.writes[0].dtype_bytes
        self.operand_bytes += block.own_extent * self.frag_bytes
        self.main_trips = max(self.main_trips, _outer_serial_trips(block))

    def _fragment_store(self, dst, block: BlockInfo) -> None:
        if is_shared(dst.scope):
            self.s_write += block.executions * dst.elements * dst.dtype_bytes
            self.staging_tiles[dst.buffer] = max(self.staging_tiles.get(dst.buffer, 0.0),
                                                 block.own_extent * dst.elements * dst.dtype_bytes)
        else:
            self.g_write += block.executions * dst.elements * dst.dtype_bytes

    def _fused_write_back(self, block: BlockInfo, fragment, others, dst) -> None:
        """The builder's fused mma epilogue (builder/fused_epilogue.py): each lane stores the
        elements it holds, with the consumer's other inputs and arithmetic, after the main loop."""
        stream = _copy_stream(block, fragment, dst, self.warp_size, self.threads)
        self.copies.append(stream)
        self.g_write += stream.bytes_total
        self.cuda_flops += block.executions * dst.elements * block.float_ops
        for src in others:
            if src.scope == "global":
                self.g_read += block.executions * src.elements * src.dtype_bytes
                self.epilogue_inputs += 1

    def _copy(self, block: BlockInfo, src, dst) -> None:
        stream = _copy_stream(block, src, dst, self.warp_size, self.threads)
        self.copies.append(stream)
        if is_shared(dst.scope):
            tiles = self.staging_tiles if is_fragment(src.scope) else self.operand_tiles
            copies_kept = self.versions if any(loop.pipelined for loop in block.loops[:block.own_start]) else 1
            tiles[dst.buffer] = max(tiles.get(dst.buffer, 0.0), float(round(  # whole bytes: pad_ratio is a quotient
                copies_kept * block.own_extent * dst.elements * dst.dtype_bytes * block.pad_ratio)))
            self.s_write += stream.bytes_total
            self.main_trips = max(self.main_trips, _outer_serial_trips(block))
        if is_shared(src.scope):
            self.s_read += stream.bytes_total
        if src.scope == "global":
            self.g_read += block.executions * src.elements * src.dtype_bytes
        if dst.scope == "global":
            self.g_write += stream.bytes_total
            if is_fragment(src.scope):  # TVM's auto copy stages the warp's rows through shared memory
                self.staging_tiles[src.buffer] = max(self.staging_tiles.get(src.buffer, 0.0),
                                                     auto_copy_staging(src, dst, self.warps))

    def _direct(self, block: BlockInfo, srcs, dst) -> None:
        for src in srcs:
            if src.scope == "global":
                self.g_read += block.executions * src.elements * src.dtype_bytes
                self.direct += block.executions * src.elements * src.dtype_bytes
            elif is_shared(src.scope):
                self.s_read += block.executions * src.elements * src.dtype_bytes
        if dst.scope == "global" and not block.is_init:
            self.g_write += block.executions * dst.elements * dst.dtype_bytes
            self.direct += block.executions * dst.elements * dst.dtype_bytes

    @property
    def straight_line(self) -> bool:
        """The pipelined k loop is unrolled whole (``pipeline.unrolled_whole``)."""
        return self.versions > 1 and unrolled_whole(self.main_trips)

    def registers(self, fragment_trips: int) -> float:
        """Registers a thread holds."""
        regs = BASE_REGISTERS
        if self.mma_count:
            acc_tile = self.mma_shape[0] * self.mma_shape[1] * self.acc_bytes
            regs += self.acc_frags * acc_tile / self.warp_size / 4
            if self.versions > 1:
                regs += PIPELINED_EXTRA_REGISTERS
            if self.versions > 1 and not self.straight_line:
                # every fragment of an inner trip, twice where the fragment pipeline has two trips
                buffered = 2 if fragment_trips > 1 else 1
                regs += buffered * self.operand_bytes / self.warp_size / 4
            else:
                live = _live_operand_fragments(self.acc_frags, self.frags_by_side)
                regs += live * self.frag_bytes / self.warp_size / 4
        return regs


def kernel_features(program: ProgramInfo, warp_size: int = 32) -> List[KernelFeatures]:
    """One KernelFeatures per kernel (top-level loop nest) of a scheduled GPU program."""
    kernels = []
    for blocks in _kernel_groups(program).values():
        threads = max(_threads(b, warp_size) for b in blocks)
        versions, fragment_trips = pipeline_shape(blocks)
        tally = _KernelTally(warp_size, threads, max(1, -(-threads // warp_size)), versions)
        for block in blocks:
            tally.add(block)
        t = tally
        indexed_at_run_time = fragments_indexed_at_run_time(blocks) and not t.straight_line
        kernels.append(KernelFeatures(
            grid=max(b.thread_extent("blockIdx") for b in blocks), threads_per_block=threads,
            warps_per_block=t.warps,
            smem_per_block=block_shared_bytes(t.operand_tiles, t.staging_tiles, pipelined=versions > 1),
            regs_per_thread=t.registers(fragment_trips), mma_flops=t.mma_flops, mma_count=t.mma_count,
            mma_m=t.mma_shape[0], mma_n=t.mma_shape[1], mma_k=t.mma_shape[2], acc_dtype_bytes=t.acc_bytes,
            cuda_core_flops=t.cuda_flops, acc_fragments_per_warp=t.acc_frags,
            operand_fragments_per_step=t.operand_frags,
            global_read_bytes=t.g_read, global_write_bytes=t.g_write, direct_global_bytes=t.direct,
            smem_read_bytes=t.s_read, smem_write_bytes=t.s_write, copies=t.copies, main_loop_trips=t.main_trips,
            unroll_max_step=max((loop.unroll_max_step for b in blocks for loop in b.loops), default=0),
            pipelined=any(loop.pipelined for b in blocks for loop in b.loops),
            global_buffer_bytes=sum(_buffer_bytes(program, name) for name in t.touched),
            operand_tiles=t.operand_tiles, staging_tiles=t.staging_tiles, pipeline_stages=versions,
            local_operand_bytes=t.operand_bytes if indexed_at_run_time else 0.0,
            parity_unrolled_regs=t.registers(2) if indexed_at_run_time and parity_loops_unrolled() else 0.0,
            epilogue_inputs=t.epilogue_inputs,
        ))
    return kernels


def _live_operand_fragments(acc_frags: float, by_side: Dict[str, float]) -> float:
    """Operand fragments live in one k-step: FM of A plus FN of B for an FM x FN warp tile.

    The loads bring FM*Kf and Kf*FN fragments; nvcc interleaves them with the MMAs of the
    unrolled k-steps, so about one step's worth is live at a time.
    """
    a, b = by_side.get("a", 0.0), by_side.get("b", 0.0)
    if a <= 0 or b <= 0 or acc_frags <= 0:
        return a + b
    fm = math.sqrt(acc_frags * a / b)
    return fm + acc_frags / fm


def _outer_serial_trips(block: BlockInfo) -> int:
    trips = 1
    for loop in block.loops[: block.own_start]:
        if loop.thread is None:
            trips *= loop.extent
    return trips


def _buffer_bytes(program: ProgramInfo, name: str) -> float:
    shape, elem = program.params.get(name, ((), 0.0))
    total = elem
    for dim in shape:
        total *= dim
    return total
