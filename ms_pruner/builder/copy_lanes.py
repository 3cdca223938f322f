"""Copies into the mma rule's swizzled shared layout, split into 16-byte chunks before TVM lowers them.

The rule marks its global->shared copies ``auto_copy`` and ``permuted_layout``. TVM's LowerAutoCopy
(MemHammer) fuses a copy tile's loops into one index and splits it over the threads and the vector
lanes: ``f = ((outer * ty + y) * 32 + x) * lanes + lane``, ``row = f // W``, ``col = f % W`` for
rows of W elements. Where W is not a multiple of the threads' step (96 or 384 elements against a
warp's 256), TVM's simplifier cannot take the lane out of ``f // W``; InjectPermutedLayout's swizzle
then keeps it inside a XOR, the vector store becomes a scatter, and InjectPTXAsyncCopy leaves a
synchronous load and store where a cp.async belonged (analysis/swizzle.py predicts which).

``prepare_permuted_copies`` writes each such copy out before lowering, with the thread and lane of
every element MemHammer gives it, but indexed by chunk: ``c = (outer * ty + y) * 32 + x``,
``row = c // (W / lanes)``, ``col = c % (W / lanes) * lanes + lane``, so the lane only ever adds.
A floor division or modulo by a multiple of the lanes of ``base + lane`` (an im2col index of a
padded conv input, its bounds test) is rewritten to the lane-free ``base // d`` or
``base % d + lane``, which holds because ``base`` is a multiple of the lanes. The block loses
``auto_copy`` (LowerAutoCopy would fuse its loops again) and ``buffer_dim_align`` (LowerAutoCopy
does not pad a permuted copy's rows; without it CompactBufferAllocation would), and keeps
``permuted_layout``. A copy that did not gather lowers to the same CUDA as before (tests).

A copy whose vector lanes would read global memory with a stride (a transposed operand: an
n-major weight into the k-major shared tile of TVM's m16n8k8 compute) is copied one element at a
time instead, whatever the switch below: InjectPTXAsyncCopy would make one cp.async of such a
vector from its first element's address, a wrong kernel (``lane_stride``).

``MS_PRUNER_SEPARATE_COPY_LANES=0`` leaves every other copy to TVM, for ablations; the analyzer
reads the same switch (``copy_lanes_separated``) and ``lane_stride``.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Tuple

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Range
from tvm.s_tir import SBlock, Schedule
from tvm.sym import Analyzer, detect_linear_equation
from tvm.tirx.analysis import undefined_vars

from .tir_rebuild import BINARY_NODES, LOADS, rebuilt, with_rewritten_funcs

COPY_LANES_ENV = "MS_PRUNER_SEPARATE_COPY_LANES"
OUTER_THREAD_TAGS = ("threadIdx.z", "threadIdx.y")
WARP_SIZE = 32
DROPPED_ANNOTATIONS = ("auto_copy", "buffer_dim_align")
LANE_STRIDES_KEPT = 4096
_LANE_STRIDES: Dict[tuple, Optional[int]] = {}
_UNSEEN = object()


def copy_lanes_separated() -> bool:
    """Whether the builder splits permuted copies by chunk (``MS_PRUNER_SEPARATE_COPY_LANES``, on unless "0")."""
    return os.environ.get(COPY_LANES_ENV, "1") != "0"


def copy_threads(extents: Dict[str, int]) -> Tuple[Tuple[str, int], ...]:
    """(tag, extent) of the threads MemHammer splits a copy over, outermost first: the enclosing
    threadIdx.z and y, and threadIdx.x (a warp where the kernel binds its lanes inside the mma
    intrinsics)."""
    outer = tuple((tag, extents[tag]) for tag in OUTER_THREAD_TAGS if extents.get(tag, 1) > 1)
    return outer + (("threadIdx.x", extents.get("threadIdx.x", WARP_SIZE)),)


def prepare_permuted_copies(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every permuted global->shared auto copy of its PrimFuncs made safe and fast to
    lower: a transposed copy one element at a time (below), any other split by chunk (above) unless
    that is switched off; ``mod`` itself where no copy needs either."""
    return with_rewritten_funcs(mod, _prepared_func)


def _prepared_func(func) -> Optional[tirx.PrimFunc]:
    copies: List[Tuple[SBlock, Dict[str, int], Optional[str]]] = []
    _find_permuted_copies(func.body, {}, copies)
    replacements = []
    for block, extents, thread_dtype in copies:
        if lane_stride(block) not in (None, 1):
            replacements.append((block, _one_element_at_a_time(block)))
        elif copy_lanes_separated():
            new = _separated_copy(block, extents, thread_dtype)
            if new is not None:
                replacements.append((block, new))
    if not replacements:
        return None
    sch = Schedule(tvm.IRModule({"main": func}))
    for block, new in replacements:
        sch.state.replace(sch.get_sref(sch.get_sblock(block.name_hint)), new, {block: new})
    return sch.mod["main"]


def lane_stride(block) -> Optional[int]:
    """Elements of the global source between two neighbouring lanes of one of ``block``'s vectors
    (1: contiguous), or None where the copy does not split into whole vectors or the stride is not
    one constant. A copy into the shared tile of a transposed operand (the k-major shared B of an
    m16n8k8 compute over weights stored n-major) has the stride of a weight row. Remembered by the
    copy's structure, since the analyzer asks it of every candidate."""
    if _plainly_contiguous(block):
        return 1
    key = (int(tvm_ffi.structural_hash(block.body, map_free_vars=True)), str(block.annotations.get("vector_bytes")))
    stride = _LANE_STRIDES.get(key, _UNSEEN)  # one lookup: another thread may clear the cache
    if stride is _UNSEEN:
        if len(_LANE_STRIDES) >= LANE_STRIDES_KEPT:
            _LANE_STRIDES.clear()
        stride = _LANE_STRIDES[key] = _lane_stride(block)
    return stride


def _loop_nest(block) -> Tuple[List[tirx.For], object]:
    """(the loops around ``block``'s innermost statement, outermost first; that statement)."""
    loops, store = [], block.body
    while isinstance(store, tirx.For):
        loops.append(store)
        store = store.body
    return loops, store


def _copied_load(block):
    """(loops, store, the global load it stores) of a copy block; the load None where there is none."""
    loops, store = _loop_nest(block)
    load = _global_load(store.value) if loops and isinstance(store, tirx.BufferStore) else None
    return loops, store, load


def _lane_stride(block) -> Optional[int]:
    """``lane_stride`` worked out: the innermost loop split into vectors (``lanes * q + lane``, as
    MemHammer splits each row), the load's flat index simplified by TVM, its coefficient of ``lane``."""
    loops, store, load = _copied_load(block)
    if load is None:
        return None
    lanes = int(block.annotations.get("vector_bytes", 16)) * 8 // tvm.DataType(store.buffer.dtype).bits
    inner = loops[-1]
    if lanes < 2 or int(inner.extent) % lanes:
        return None
    dtype = str(inner.loop_var.ty)
    analyzer, vector, lane = Analyzer(), tirx.Var("vector", dtype), tirx.Var("lane", dtype)
    for iter_var in block.iter_vars:
        analyzer.bind(iter_var.var, iter_var.dom)
    for loop in loops[:-1]:
        analyzer.bind(loop.loop_var, Range.from_min_extent(loop.min, loop.extent))
    analyzer.bind(vector, Range.from_min_extent(tirx.IntImm(dtype, 0), tirx.IntImm(dtype, int(inner.extent) // lanes)))
    analyzer.bind(lane, Range.from_min_extent(tirx.IntImm(dtype, 0), tirx.IntImm(dtype, lanes)))
    split = vector * lanes + lane

    def lane_free(index):
        if not _uses(index, inner.loop_var):
            return index
        return rebuilt(index, lambda var: split if var.same_as(inner.loop_var) else var,
                        lambda node: _lane_free_division(node, lane, lanes, analyzer))

    try:
        indices = [lane_free(index) for index in load.indices]
    except TypeError:
        return None
    flat = indices[0]
    for extent, index in zip(load.source.shape[1:], indices[1:]):
        flat = flat * extent + index
    coefficients = detect_linear_equation(analyzer.simplify(flat), [lane])
    step = analyzer.simplify(coefficients[0]) if len(coefficients) == 2 else None
    return int(step.value) if isinstance(step, tirx.IntImm) else None


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in undefined_vars(expr, []))


def _plainly_contiguous(block) -> bool:
    """Whether ``block``'s innermost loop adds itself to the last index of its global load and
    appears in no other index (a GEMM operand copied as stored): ``lane_stride`` 1 at a glance."""
    loops, _, load = _copied_load(block)
    if load is None:
        return False
    inner = loops[-1].loop_var
    last = load.indices[-1]
    if any(_uses(index, inner) for index in load.indices[:-1]) or not isinstance(last, tirx.Add):
        return False
    rest = last.a if last.b.same_as(inner) else last.b if last.a.same_as(inner) else None
    return rest is not None and not _uses(rest, inner)


def _global_load(expr):
    """The load of a global buffer in a copy's stored value (a bounds test or a cast may wrap it)."""
    if type(expr).__name__ in LOADS:
        return expr if expr.source.scope() == "global" else None
    if isinstance(expr, tvm.ir.expr.Call):  # of an ``if_then_else``, the values, not the bounds test
        children = list(expr.args[1:] if expr.op.name == "prim.if_then_else" else expr.args)
    elif isinstance(expr, (tirx.Cast, tirx.Not)):
        children = [expr.value if isinstance(expr, tirx.Cast) else expr.a]
    elif isinstance(expr, tirx.Select):
        children = [expr.true_value, expr.false_value]
    elif isinstance(expr, BINARY_NODES):
        children = [expr.a, expr.b]
    else:
        children = []
    return next((load for load in map(_global_load, children) if load is not None), None)


def _one_element_at_a_time(block) -> SBlock:
    """``block`` copying one element a thread at a time. InjectPTXAsyncCopy turns a vector store whose
    index is a ramp into one cp.async from the load's ramp *base*, whatever the load's stride, so a
    copy whose lanes read a column of a row-major tile would copy part of a row instead. A scalar
    copy stays synchronous (cp.async moves 4 bytes or more) and lowers to what it reads."""
    elem_bytes = max(1, tvm.DataType(_loop_nest(block)[1].buffer.dtype).bits // 8)
    annotations = {**block.annotations, "vector_bytes": elem_bytes}
    return SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, block.body, block.init,
                  block.alloc_buffers, block.match_buffers, annotations)


def _find_permuted_copies(stmt, extents: Dict[str, int], found: list, thread_dtype: Optional[str] = None) -> None:
    """Each ``auto_copy`` block marked ``permuted_layout`` g2s*, with the thread extents around it and
    the index type of their variables (int64 in some imported models)."""
    kind = type(stmt).__name__
    if kind == "For" and stmt.thread_binding is not None:
        extents = {**extents, str(stmt.thread_binding.thread_tag): int(stmt.extent)}
        thread_dtype = str(stmt.loop_var.ty)
    if kind == "SBlock" and "auto_copy" in stmt.annotations \
            and str(stmt.annotations.get("permuted_layout", "")).startswith("g2s"):
        found.append((stmt, extents, thread_dtype))
        return
    children = {"SBlockRealize": lambda: [stmt.block], "SeqStmt": lambda: list(stmt.seq),
                "IfThenElse": lambda: [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])}
    for child in children.get(kind, lambda: [stmt.body] if hasattr(stmt, "body") else [])():
        _find_permuted_copies(child, extents, found, thread_dtype)


def _separated_copy(block, extents: Dict[str, int], thread_dtype: Optional[str]) -> Optional[SBlock]:
    """``block`` with its loop nest written chunk by chunk, or None where it is not a plain nest of
    loops around one store whose rows split into whole vectors. The chunk loops take the index type
    of the threads they are bound to; each original loop's value is cast to that loop's type."""
    loops, store = _loop_nest(block)
    if not loops or not isinstance(store, tirx.BufferStore):
        return None
    sizes = [int(loop.extent) for loop in loops]
    lanes = int(block.annotations.get("vector_bytes", 16)) * 8 // tvm.DataType(store.buffer.dtype).bits
    if lanes < 2 or sizes[-1] % lanes:
        return None
    threads = copy_threads(extents)
    chunks = math.prod(sizes[:-1]) * (sizes[-1] // lanes)
    outer_name = "_".join(loop.loop_var.name for loop in loops) + "_fused_0"  # MemHammer's name for it
    nest = _ChunkNest(threads, -(-chunks // math.prod(e for _, e in threads)), lanes, outer_name,
                      thread_dtype or str(loops[-1].loop_var.ty))
    values = nest.loop_values(sizes)
    by_var = {loop.loop_var: value if str(loop.loop_var.ty) == nest.dtype else tirx.Cast(loop.loop_var.ty, value)
              for loop, value in zip(loops, values)}
    try:
        indices = [nest.lane_free(i, by_var) for i in store.indices]
        value = nest.lane_free(store.value, by_var)
    except TypeError:
        return None
    body = nest.wrap(tirx.BufferStore(store.buffer, value, indices), chunks)
    annotations = {k: v for k, v in block.annotations.items() if k not in DROPPED_ANNOTATIONS}
    return SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                  block.alloc_buffers, block.match_buffers, annotations)


class _ChunkNest:
    """The loops of a chunked copy: ``outer`` (serial), the threads (bound), ``lane`` (vectorized)."""

    def __init__(self, threads, outer_extent: int, lanes: int, outer_name: str, dtype: str):
        self.threads, self.lanes, self.dtype = threads, lanes, dtype  # the copy's index type (int64 in some models)
        self.outer_extent = outer_extent
        self.outer, self.lane = tirx.Var(outer_name, dtype), tirx.Var("lane", dtype)
        self.thread_vars = [tirx.Var(tag.replace(".", "_"), dtype) for tag, _ in threads]
        self.chunk = self.outer
        for var, (_, extent) in zip(self.thread_vars, threads):
            self.chunk = self.chunk * extent + var
        self.analyzer = Analyzer()
        for var, extent in [(self.outer, outer_extent), *zip(self.thread_vars, (e for _, e in threads)),
                            (self.lane, lanes)]:
            self.analyzer.bind(var, self.range(extent))

    def const(self, value: int):
        return tirx.IntImm(self.dtype, value)

    def range(self, extent: int) -> Range:
        return Range.from_min_extent(self.const(0), self.const(extent))

    def loop_values(self, sizes: List[int]) -> list:
        """Each original loop's value at (chunk, lane), row-major as MemHammer fuses them."""
        per_row = sizes[-1] // self.lanes
        values = [tirx.floormod(self.chunk, per_row) * self.lanes + self.lane]
        rest = tirx.floordiv(self.chunk, per_row)
        for depth, size in enumerate(reversed(sizes[:-1])):
            outermost = depth == len(sizes) - 2
            values.insert(0, rest if outermost else tirx.floormod(rest, size))
            rest = tirx.floordiv(rest, size)
        return values

    def lane_free(self, expr, by_var: Dict):
        """``expr`` with the original loops' values, each floor division or modulo of ``base + lane``
        by a multiple of the lanes taken lane-free."""
        return rebuilt(expr, lambda var: by_var.get(var, var), self._split_off_lane)

    def _split_off_lane(self, node):
        return _lane_free_division(node, self.lane, self.lanes, self.analyzer)

    def wrap(self, store, chunks: int):
        body = store
        if self.outer_extent * math.prod(e for _, e in self.threads) != chunks:
            body = tirx.IfThenElse(self.chunk < self.const(chunks), body, None)
        body = tirx.For(self.lane, self.const(0), self.const(self.lanes), tirx.ForKind.VECTORIZED, body)
        for var, (tag, extent) in reversed(list(zip(self.thread_vars, self.threads))):
            body = tirx.For(var, self.const(0), self.const(extent), tirx.ForKind.THREAD_BINDING, body,
                            thread_binding=tirx.IterVar(self.range(extent), var, tirx.IterVar.ThreadIndex, tag))
        return tirx.For(self.outer, self.const(0), self.const(self.outer_extent), tirx.ForKind.SERIAL, body)


def _lane_free_division(node, lane, lanes: int, analyzer: Analyzer):
    """``node``, a floor division or modulo of ``base + lane`` by a multiple of ``lanes`` with
    ``base`` a multiple of ``lanes``, as ``base // d`` or ``base % d + lane``; other nodes as they are."""
    divisor = node.b
    if not isinstance(divisor, tirx.IntImm) or divisor.value % lanes or not _uses(node.a, lane):
        return node
    zero = tirx.IntImm(str(lane.ty), 0)
    base = rebuilt(node.a, lambda var: zero if var.same_as(lane) else var)
    if not (analyzer.can_prove_equal(node.a - base, lane) and analyzer.can_prove_equal(tirx.floormod(base, lanes), 0)):
        return node
    if isinstance(node, tirx.FloorDiv):
        return tirx.floordiv(base, divisor)
    return tirx.floormod(base, divisor) + lane
