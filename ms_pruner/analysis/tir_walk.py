"""One pass over a scheduled TensorIR PrimFunc that records every block with its loop nest.

The walk runs on the *scheduled* TIR (after MetaSchedule's postprocessors), not on lowered code:
it is ~50x cheaper than lowering and still shows everything the analyzer needs: thread bindings,
vectorize/unroll/pipeline annotations, buffer scopes, the regions each block touches, and the
tensor intrinsics that tensorization inlined. Allocation shapes are *not* compacted at this stage,
so footprints are derived from loop extents instead of ``alloc_buffers``.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from tvm.tirx.analysis import undefined_vars

from ..builder.copy_lanes import lane_stride

from .access import WarpAccess, _int, _shape, dtype_bytes, index_strides
from .copies import COPY_MEMORY, CopyMemory
from .swizzle import permuted_copy_facts

LOOP_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}
AUTO_COPY_VECTOR_BYTES = 16
FLOAT_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min")

# Intrinsics executed by a whole warp (the loop nest around them has no threadIdx.x).
WARP_INTRINSICS = (
    "tvm_mma_sync",
    "tvm_load_matrix_sync",
    "tvm_store_matrix_sync",
    "tvm_fill_fragment",
    "ptx_mma",
    "ptx_ldmatrix",
    "mma_store",
    "mma_fill",
)
MMA_INTRINSICS = ("tvm_mma_sync", "ptx_mma")
FRAGMENT_LOADS = ("tvm_load_matrix_sync", "ptx_ldmatrix")
FRAGMENT_STORES = ("tvm_store_matrix_sync", "mma_store")


@dataclasses.dataclass(frozen=True)
class Loop:
    extent: int
    kind: str  # serial | parallel | vectorized | unrolled | thread
    thread: Optional[str]  # "blockIdx.x", "threadIdx.y", "vthread", ... for kind == "thread"
    unroll_max_step: int  # pragma_auto_unroll_max_step, 0 when absent
    pipelined: bool  # carries software_pipeline_stage
    stages: Tuple[int, ...] = ()  # its software_pipeline_stage, one per statement of its body


@dataclasses.dataclass(frozen=True)
class Access:
    buffer: str
    scope: str
    dtype_bytes: float
    shape: Tuple[int, ...]  # extents of the region one execution of the block touches
    strides: Tuple[int, ...] = ()  # per enclosing loop (BlockInfo.loops), see access.index_strides

    @property
    def elements(self) -> int:
        total = 1
        for extent in self.shape:
            total *= extent
        return total


@dataclasses.dataclass
class BlockInfo:
    name: str
    loops: Tuple[Loop, ...]  # outermost first, thread bindings included
    own_start: int  # loops[own_start:] enclose this block and nothing else
    reads: List[Access]
    writes: List[Access]
    intrinsics: List[str]  # tirx intrinsic names called in the body ("tvm_mma_sync", ...)
    float_ops: int  # scalar float ops of the body's stores (0 for tensorized blocks)
    is_init: bool
    kernel: int  # index of the root's top-level statement the block sits under
    pad_ratio: float = 1.0  # storage_align padding of the written tile (padded / dense size)
    access: Optional[WarpAccess] = None  # per-warp memory behaviour of a global<->shared copy
    active_ratio: float = 1.0  # share of own iterations the block predicate keeps
    address_divisions: int = 0  # per element of a global<->shared copy (index_cost.address_divisions)
    permuted: bool = False  # a global->shared copy into the mma rule's permuted (swizzled, unpadded) layout
    auto_copy_lanes: int = 0  # an ``auto_copy`` block (lowered by TVM for all its threads): its vector lanes
    cooperative_threads: int = 1  # threads of the enclosing bindings that share one execution (an auto copy's)
    gathered: bool = False  # a permuted copy whose swizzled index keeps the vector lane: synchronous (swizzle.py)
    guarded: bool = False  # an auto copy storing an ``if_then_else`` (a padded input's bounds test)
    source_stride: int = 1  # elements of the global source between neighbouring threads of a transposed auto copy

    @property
    def executions(self) -> float:
        """How many times the body runs over the whole launch (per warp for warp intrinsics).

        A thread tag bound again inside a loop already bound to it (a cooperative fetch nested in
        the compute's threadIdx.y) is the same hardware index, so it counts once.
        """
        total = 1
        for loop in self.loops:
            if loop.thread is None:
                total *= loop.extent
        for extent in self.thread_extents().values():
            total *= extent
        return total * self.active_ratio / self.cooperative_threads

    def thread_extents(self) -> Dict[str, int]:
        extents: Dict[str, int] = {}
        for loop in self.loops:
            if loop.thread is not None:
                extents[loop.thread] = max(extents.get(loop.thread, 1), loop.extent)
        return extents

    @property
    def own_extent(self) -> float:
        """Iterations of the block's own loops that do work (the tile it moves)."""
        total = 1
        for loop in self.loops[self.own_start:]:
            total *= loop.extent
        return total * self.active_ratio

    @property
    def warp_level(self) -> bool:
        return any(name in WARP_INTRINSICS for name in self.intrinsics)

    def thread_extent(self, prefix: str) -> int:
        total = 1
        for tag, extent in self.thread_extents().items():
            if tag.startswith(prefix):
                total *= extent
        return total

    @property
    def vector_lanes(self) -> int:
        lanes = 1
        for loop in self.loops[self.own_start:]:
            if loop.kind == "vectorized":
                lanes *= loop.extent
        return lanes


@dataclasses.dataclass
class ProgramInfo:
    blocks: List[BlockInfo]
    params: Dict[str, Tuple[Tuple[int, ...], float]]  # global buffer name -> (shape, dtype bytes)


def _regions(regions) -> List[Tuple[Access, list, List[int]]]:
    """(Access, the region's start indices, its buffer's shape) of each region, each TVM array read
    once: the walk reads every block's regions, and a read through the FFI costs more than the rest."""
    out = []
    for region in regions:
        buf = region.source
        ranges = list(region.region)
        access = Access(buffer=str(buf.name), scope=str(buf.scope()), dtype_bytes=dtype_bytes(buf.dtype),
                        shape=tuple(_int(rng.extent) for rng in ranges))
        out.append((access, [rng.min for rng in ranges], _shape(buf)))
    return out


class _Walker:
    def __init__(self, strides: bool = False):
        self.strides = strides
        self.blocks: List[BlockInfo] = []
        self.loops: List[Loop] = []
        self.loop_vars: List = []
        self.kernel = 0
        self.pending_copies: List = []

    def visit(self, stmt) -> List[int]:
        kind = type(stmt).__name__
        if kind == "For":
            return self._for(stmt)
        if kind == "SBlockRealize":
            return self._block(stmt)
        if kind == "SeqStmt":
            ids: List[int] = []
            for child in stmt.seq:
                ids.extend(self.visit(child))
            return ids
        if kind == "IfThenElse":
            ids = self.visit(stmt.then_case)
            if stmt.else_case is not None:
                ids.extend(self.visit(stmt.else_case))
            return ids
        body = getattr(stmt, "body", None)
        return self.visit(body) if body is not None else []

    def _for(self, loop) -> List[int]:
        binding = loop.thread_binding
        annotations = loop.annotations
        unroll = annotations.get("pragma_auto_unroll_max_step", None) if annotations else None
        stages = annotations.get("software_pipeline_stage", None) if annotations else None
        self.loops.append(
            Loop(
                extent=_int(loop.extent),
                kind=LOOP_KINDS.get(int(loop.kind), "serial"),
                thread=str(binding.thread_tag) if binding is not None else None,
                unroll_max_step=_int(unroll, 0) if unroll is not None else 0,
                pipelined=stages is not None,
                stages=tuple(_int(v) for v in stages) if stages is not None else (),
            )
        )
        self.loop_vars.append(loop.loop_var)
        depth = len(self.loops) - 1
        ids = self.visit(loop.body)
        self.loops.pop()
        self.loop_vars.pop()
        if len(ids) == 1:
            self.blocks[ids[0]].own_start = depth
        return ids

    def _block(self, block) -> List[int]:
        realize = block
        block = block.block
        if block.name_hint == "root":
            return self._root(block.body)
        index = len(self.blocks)
        reads, writes = self._accesses(realize, block)
        info = BlockInfo(
            name=str(block.name_hint),
            loops=tuple(self.loops),
            own_start=len(self.loops),
            reads=reads,
            writes=writes,
            intrinsics=[],
            float_ops=0,
            is_init=block.name_hint.endswith("_init"),
            kernel=self.kernel,
            permuted=bool(block.annotations) and str(block.annotations.get("permuted_layout", "")).startswith("g2s"),
        )
        if block.annotations and block.annotations.get("auto_copy", None) is not None:
            info.auto_copy_lanes, info.cooperative_threads = self._auto_copy(realize, block, writes)
            if info.permuted and writes:
                facts = permuted_copy_facts(block.body, writes[0].shape, info.thread_extents(), info.auto_copy_lanes)
                info.gathered, info.guarded, info.address_divisions = facts
                stride = lane_stride(block)
                if stride not in (None, 1):  # the builder copies it one element at a time (copy_lanes.py)
                    info.auto_copy_lanes, info.gathered, info.source_stride = 1, True, abs(stride)
        self.blocks.append(info)
        nested: List[int] = []
        self._scan(block.body, info, nested)
        if type(block.body).__name__ == "BufferStore" and info.float_ops == 0:
            align = block.annotations.get("buffer_dim_align", None) if block.annotations else None
            self.pending_copies.append((info, realize, block.body, align, tuple(self.loop_vars)))
        return [index] + nested

    def _root(self, body) -> List[int]:
        """The root block's children, one kernel each."""
        children = list(body.seq) if type(body).__name__ == "SeqStmt" else [body]
        ids: List[int] = []
        for index, child in enumerate(children):
            self.kernel = index
            ids.extend(self.visit(child))
        return ids

    def _accesses(self, realize, block):
        """(reads, writes) of a block, with each access's index strides when they are walked."""
        regions = _regions(block.reads)
        read_count = len(regions)
        regions += _regions(block.writes)
        accesses = [access for access, _, _ in regions]
        if self.strides:
            strides = index_strides(realize, [(starts, shape) for _, starts, shape in regions], self.loop_vars,
                                    self.loops)
            accesses = [dataclasses.replace(a, strides=st) for a, st in zip(accesses, strides)]
        return accesses[:read_count], accesses[read_count:]

    def _scan(self, node, info: BlockInfo, nested: List[int]) -> None:
        """A block body's intrinsic calls and float ops into ``info``; the blocks nested in it are
        visited, their ids added to ``nested``."""
        kind = type(node).__name__
        if kind == "Evaluate":
            op = getattr(node.value, "op", None)
            if op is not None:
                info.intrinsics.append(intrinsic_name(op))
        elif kind == "BufferStore":
            info.float_ops += _count_float_ops(node.value)
        elif kind == "SeqStmt":
            for child in node.seq:
                self._scan(child, info, nested)
        elif kind == "For" and node.thread_binding is not None and not _holds_block(node):
            # a warp intrinsic's lanes (the mma rule's ``for tx in thread_binding(32)``)
            self._scan(node.body, info, nested)
        elif kind in ("For", "SBlockRealize"):
            nested.extend(self.visit(node))
        elif kind == "IfThenElse":
            self._scan(node.then_case, info, nested)
            if node.else_case is not None:
                self._scan(node.else_case, info, nested)
        else:
            body = getattr(node, "body", None)
            if body is not None:
                self._scan(body, info, nested)

    def _auto_copy(self, realize, block, writes) -> Tuple[int, int]:
        """(vector lanes, threads sharing one execution) of an ``auto_copy`` block: TVM's lowering
        spreads its loop nest over the threads of the enclosing bindings whose index the block does
        not read (its ``vector_bytes`` at a time, 16 where unset), so those threads run it once."""
        used = set()
        for value in realize.iter_values:
            used.update(str(var.name) for var in undefined_vars(value, []))
        shared = 1
        for loop, var in zip(self.loops, self.loop_vars):
            if loop.thread is not None and loop.thread.startswith("threadIdx") and str(var.name) not in used:
                shared *= loop.extent
        vector_bytes = _int(block.annotations.get("vector_bytes", AUTO_COPY_VECTOR_BYTES), AUTO_COPY_VECTOR_BYTES)
        elem = writes[0].dtype_bytes if writes else 2.0
        return max(1, int(vector_bytes // elem)), shared

    def resolve_copies(self, memory: CopyMemory, warp_size: int = 32) -> None:
        """Once every block's own loops are known: memory patterns and storage_align padding
        (copies.py), from ``memory`` where an earlier candidate had the same copy."""
        for info, realize, store, align, loop_vars in self.pending_copies:
            facts = memory.facts(realize, store, info.loops, loop_vars, info.own_start, align, warp_size)
            info.active_ratio = facts.active_ratio
            info.access = facts.access
            info.address_divisions = facts.address_divisions
            info.pad_ratio = 1.0 if info.permuted else facts.pad_ratio  # the swizzle replaces the padding
            if facts.scalarized is not None:
                loops = list(info.loops)
                loops[facts.scalarized] = dataclasses.replace(loops[facts.scalarized], kind="serial")
                info.loops = tuple(loops)


def intrinsic_name(op) -> str:
    """An intrinsic's name as the analyzer knows it: ``tirx.ptx_legacy.mma`` (TVM 0.27's spelling of
    the mma rule's intrinsics) is ``ptx_mma``, ``tirx.tvm_mma_sync`` is ``tvm_mma_sync``."""
    return str(op.name).replace("tirx.", "").replace("ptx_legacy.", "ptx_")


def _holds_block(loop) -> bool:
    """Whether a loop nest holds a block (else it is part of the body of the block around it)."""
    stack = [loop.body]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind == "SBlockRealize":
            return True
        if kind == "SeqStmt":
            stack.extend(node.seq)
        elif kind == "IfThenElse":
            stack.extend(n for n in (node.then_case, node.else_case) if n is not None)
        elif getattr(node, "body", None) is not None:
            stack.append(node.body)
    return False


def _count_float_ops(expr) -> int:
    """Arithmetic float operations in an expression tree (casts and loads are free)."""
    count = 0
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind in FLOAT_OPS:
            if "float" in str(getattr(node, "ty", "")):
                count += 1
            stack.append(node.a)
            stack.append(node.b)
        elif kind in ("Cast",):
            stack.append(node.value)
        elif kind == "Call":
            stack.extend(node.args)
        elif kind == "Select":
            stack.extend([node.true_value, node.false_value])
    return count


def walk_primfunc(func, strides: bool = False, copies: Optional[CopyMemory] = None) -> ProgramInfo:
    """Every block of ``func`` (a scheduled PrimFunc) with its loops, accesses and intrinsics.

    ``strides`` also records how each loop moves each access (``Access.strides``): the CPU model's
    reuse analysis needs it, the GPU model does not, and it costs ~20% more walking time.
    ``copies`` keeps the copy blocks' facts across calls (default: the process's ``COPY_MEMORY``).
    """
    walker = _Walker(strides)
    walker.visit(func.body)
    walker.resolve_copies(copies if copies is not None else COPY_MEMORY)
    params = {}
    for buf in func.params:
        if hasattr(buf, "shape"):  # TVM 0.27 PrimFunc params are the buffers themselves
            params[str(buf.name)] = (tuple(_int(s) for s in buf.shape), dtype_bytes(buf.dtype))
    return ProgramInfo(blocks=walker.blocks, params=params)
