"""How one warp's copy instruction touches memory: global sectors/lines and shared-memory banks.

A copy block's index expressions are compiled once into a Python function of the loop variables;
evaluating it for the 32 lanes of the first warp (every other loop at 0) gives the exact
addresses, hence the 32-byte sectors and 128-byte lines a global access needs (coalescing) and
the wavefronts a shared access needs (bank conflicts). This is what separates a tile copied with
16-byte vectors along rows from the same tile gathered column by column.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tvm
from tvm.sym import Analyzer
from tvm.tirx.analysis import undefined_vars

SECTOR_BYTES = 32
LINE_BYTES = 128
BANKS = 32
BANK_BYTES = 4

_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "FloorDiv": np.floor_divide,
    "FloorMod": np.mod,
    "Min": np.minimum,
    "Max": np.maximum,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "EQ": np.equal,
    "NE": np.not_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
}


@dataclasses.dataclass(frozen=True)
class WarpAccess:
    """Per warp-level instruction of a copy (over all its vector lanes)."""

    useful_bytes: float
    global_sectors: float
    global_lines: float
    shared_wavefronts: float
    # The vector lanes of a thread read consecutive global elements. When they do not, code
    # generation gathers them with one scalar load a lane (``make_half4(B_ptr[v_.x], ...)``).
    lanes_contiguous: bool = True


def _key(node) -> int:
    return node.__chandle__()


def _bindings(realize) -> Dict[int, object]:
    """A block's iteration variables (by handle) -> the loop expressions they are bound to."""
    return {_key(iv.var): value for iv, value in zip(realize.block.iter_vars, realize.iter_values)}


class _Compiler:
    """PrimExpr -> closure over ``points`` (one row per loop variable, one column per point).

    Closures over numpy rows evaluate every lane of a warp in one pass, without parsing source.
    """

    def __init__(self, var_slots: Dict[int, int], bindings: Dict[int, object]):
        self.var_slots = var_slots
        self.bindings = bindings

    def build(self, expr) -> Optional[Callable]:
        kind = type(expr).__name__
        if kind == "IntImm":
            value = int(expr.value)
            return lambda points: value
        if kind == "Var":
            key = _key(expr)
            if key in self.var_slots:
                slot = self.var_slots[key]
                return lambda points: points[slot]
            if key in self.bindings:
                return self.build(self.bindings[key])
            return lambda points: 0
        if kind in _BINARY:
            left, right = self.build(expr.a), self.build(expr.b)
            if left is None or right is None:
                return None
            op = _BINARY[kind]
            return lambda points: op(left(points), right(points))
        if kind == "Cast":
            return self.build(expr.value)
        if kind == "Not":
            inner = self.build(expr.a)
            return None if inner is None else (lambda points: np.logical_not(inner(points)))
        return None

    def flat_index(self, indices: Sequence, shape: Sequence[int]) -> Optional[Callable]:
        if len(shape) != len(indices):
            return None
        terms = []
        stride = 1
        for index, extent in zip(reversed(list(indices)), reversed(list(shape))):
            term = self.build(index)
            if term is None:
                return None
            terms.append((term, stride))
            stride *= extent
        return lambda points: sum(term(points) * scale for term, scale in terms)


def predicate_ratio(realize, loops, loop_vars, own_start: int) -> float:
    """Share of a block's own iterations its predicate keeps (a split that does not divide).

    MetaSchedule's cooperative fetch splits a fused tile by (threads, vector); when that does not
    divide, the block carries a predicate and the last iterations do nothing.
    """
    predicate = realize.predicate
    if type(predicate).__name__ == "IntImm":
        return 1.0 if int(predicate.value) else 0.0
    slots = {_key(var): i for i, var in enumerate(loop_vars)}
    fn = _Compiler(slots, {}).build(predicate)
    if fn is None:
        return 1.0
    extents = [loop.extent for loop in loops[own_start:]]
    grids = np.meshgrid(*[np.arange(e, dtype=np.int64) for e in extents], indexing="ij") if extents else []
    size = int(np.prod(extents)) if extents else 1
    zeros = np.zeros(size, dtype=np.int64)
    rows = [zeros] * own_start + [g.reshape(-1) for g in grids]
    kept = np.broadcast_to(np.asarray(fn(rows)), (size,))
    return float(np.count_nonzero(kept)) / size


def index_strides(realize, regions, loop_vars, loops) -> List[Tuple[int, ...]]:
    """Per region of a block (its start indices and its buffer's shape), per enclosing loop: how far
    (in elements) one step of the loop moves the access; 0 = invariant.

    Each region's start is evaluated at every loop's first, second and last value (others at 0).
    A fused loop that reaches the index only through a floordiv moves it at its last value, not at
    its second: such a loop gets the average step over its range, so it still counts as moving
    the access. An index the compiler cannot read moves with every loop (no reuse assumed). The
    block's iteration variables are evaluated at those points once and shared by its regions.
    """
    count = len(loops)
    points = np.zeros((count, 2 * count + 1), dtype=np.int64)
    for i, loop in enumerate(loops):
        points[i, 1 + i] = 1
        points[i, 1 + count + i] = max(0, loop.extent - 1)
    rows = list(points)
    slots = {_key(var): i for i, var in enumerate(loop_vars)}
    over_loops = _Compiler(dict(slots), {})
    unread = {}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        fn = over_loops.build(value)
        if fn is None:
            unread[_key(iv.var)] = value
            continue
        slots[_key(iv.var)] = len(rows)
        rows.append(fn(rows))
    compiler = _Compiler(slots, unread)
    return [_strides(compiler.flat_index(starts, shape), rows, loops) for starts, shape in regions]


def _strides(fn: Optional[Callable], rows: list, loops) -> Tuple[int, ...]:
    count = len(loops)
    if fn is None:
        return (1,) * count
    flat = np.broadcast_to(np.asarray(fn(rows), dtype=np.int64), (2 * count + 1,))
    strides = []
    for i, loop in enumerate(loops):
        step = int(flat[1 + i] - flat[0])
        if step == 0 and loop.extent > 1 and flat[1 + count + i] != flat[0]:
            step = max(1, int(abs(flat[1 + count + i] - flat[0]) // (loop.extent - 1)))
        strides.append(step)
    return tuple(strides)


def _find_load(expr):
    """The first buffer load in an expression (through casts and if_then_else)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind in ("TensorLoad", "BufferLoad"):
            return node
        if kind == "Cast":
            stack.append(node.value)
        elif kind == "Call":
            stack.extend(reversed(list(node.args)))
    return None


def _int(expr, default: int = 1) -> int:
    """A constant (a Python int or an IntImm) as an int; ``default`` for anything else."""
    if isinstance(expr, int):
        return int(expr)
    value = getattr(expr, "value", None)
    return int(value) if value is not None else default


def _shape(buffer) -> List[int]:
    return [int(getattr(dim, "value", dim)) for dim in buffer.shape]


def vector_loops(loops, own_start: int) -> List[int]:
    """Indices of a block's own vectorized loops, outermost first (code generation vectorizes the last)."""
    return [i for i in range(own_start, len(loops)) if loops[i].kind == "vectorized"]


def _warp_lanes(loops, own_start: int, warp_size: int):
    """Loop-variable values (rows) for each (thread, vector lane) of the first warp (columns)."""
    tags: Dict[str, int] = {}
    for loop in loops:
        if loop.thread is not None and loop.thread.startswith("threadIdx"):
            tags[loop.thread] = max(tags.get(loop.thread, 1), loop.extent)
    x, y, z = (tags.get(f"threadIdx.{axis}", 1) for axis in "xyz")
    threads = min(warp_size, x * y * z)
    vector = vector_loops(loops, own_start)
    lanes = loops[vector[-1]].extent if vector else 1
    lin = np.repeat(np.arange(threads, dtype=np.int64), lanes)
    ids = {"threadIdx.x": lin % x, "threadIdx.y": (lin // x) % y, "threadIdx.z": lin // (x * y)}
    zeros = np.zeros(threads * lanes, dtype=np.int64)
    rows = [ids.get(loop.thread, zeros) if loop.thread is not None else zeros for loop in loops]
    if vector:
        rows[vector[-1]] = np.tile(np.arange(lanes, dtype=np.int64), threads)
    return rows, threads, lanes


def warp_access(realize, store, loops, loop_vars, own_start: int,
                warp_size: int = 32) -> Optional[WarpAccess]:
    """Sectors/lines/wavefronts of one warp instruction of a global<->shared copy, or None."""
    load = _find_load(store.value)
    if load is None:
        return None
    stored, loaded = store.buffer, load.source
    scopes = (stored.scope(), loaded.scope())
    if "global" not in scopes:
        return None
    slots = {_key(var): i for i, var in enumerate(loop_vars)}
    compiler = _Compiler(slots, _bindings(realize))
    global_side = (stored, store.indices) if scopes[0] == "global" else (loaded, load.indices)
    other_side = (loaded, load.indices) if scopes[0] == "global" else (stored, store.indices)
    global_fn = compiler.flat_index(global_side[1], _shape(global_side[0]))
    if global_fn is None:
        return None
    other_fn = compiler.flat_index(other_side[1], _shape(other_side[0]))
    elem = dtype_bytes(global_side[0].dtype)
    other_elem = dtype_bytes(other_side[0].dtype)
    points, threads, lanes = _warp_lanes(loops, own_start, warp_size)
    address = np.asarray(global_fn(points), dtype=np.float64) * elem
    sectors = np.unique(address // SECTOR_BYTES).size
    lines = np.unique(address // LINE_BYTES).size
    wavefronts = 1.0
    if other_fn is not None and other_side[0].scope().startswith("shared"):
        words = np.unique((np.asarray(other_fn(points), dtype=np.float64) * other_elem) // BANK_BYTES)
        conflict = int(np.bincount((words % BANKS).astype(np.int64), minlength=BANKS).max())
        wavefronts = max(conflict, threads * lanes * other_elem / LINE_BYTES)
    first_thread = address[:lanes]
    return WarpAccess(
        useful_bytes=threads * lanes * elem,
        global_sectors=float(sectors),
        global_lines=float(lines),
        shared_wavefronts=wavefronts,
        lanes_contiguous=bool(np.all(np.diff(first_thread) == elem)),
    )


def guard_of(store):
    """The ``if_then_else`` a copy stores (a bounds test per element, as a padded input has), or None."""
    value = store.value
    while type(value).__name__ == "Cast":
        value = value.value
    if type(value).__name__ == "Call" and str(value.op.name).endswith("if_then_else"):
        return value
    return None


_last_analyzer: dict = {}


def as_lowered(realize, loops, loop_vars, expr):
    """``expr`` as lowering's Simplify leaves it: TVM's arithmetic analyzer with every loop's range
    and the block's iteration variables bound. The last copy's analyzer and results are kept: its
    lane test and its division count simplify the same bounds test (~1 ms on a conv2d tile)."""
    global _last_analyzer  # pylint: disable=global-statement

    key = (_key(realize), tuple(_key(var) for var in loop_vars), tuple(loop.extent for loop in loops))
    if _last_analyzer.get("key") != key:
        analyzer = Analyzer()
        for loop, var in zip(loops, loop_vars):
            analyzer.bind(var, tvm.ir.Range.from_min_extent(0, loop.extent))
        for iv, bound in zip(realize.block.iter_vars, realize.iter_values):
            analyzer.bind(iv.var, bound)
        # the kept realize and vars hold their handles, so no other node can reuse the key
        _last_analyzer = {"key": key, "analyzer": analyzer, "nodes": (realize, tuple(loop_vars)), "done": {}}
    done = _last_analyzer["done"]
    if _key(expr) not in done:
        done[_key(expr)] = (expr, _last_analyzer["analyzer"].simplify(expr))
    return done[_key(expr)][1]


def scalarized_vector_loop(realize, store, loops, loop_vars, own_start: int) -> Optional[int]:
    """The vectorized loop of a copy that code generation turns back into a serial one, or None.

    TVM's VectorizeLoop cannot make one vector load of an ``if_then_else`` whose condition depends
    on the vector lane (a tile of a zero-padded conv2d input whose bounds test reads the lane through
    the im2col index). It emits a loop of predicated scalar loads instead (``..._s`` in the CUDA
    source), so the copy moves one element per instruction whatever its ``T.vectorized`` extent.
    The test is on the condition as lowering's Simplify leaves it, with every loop's range known:
    when a vector stays inside one input channel run, ``(8 * tx + lane) // 64`` becomes ``tx // 8``,
    the lane drops out and the load stays one predicated vector (H100 conv2d records: 57 of 128
    were vector loads the syntactic test had called scalar).
    """
    value = guard_of(store)
    if value is None:
        return None
    vector = vector_loops(loops, own_start)
    if not vector:
        return None

    used = {_key(v) for v in undefined_vars(as_lowered(realize, loops, loop_vars, value.args[0]))}
    lane_dependent = [i for i in vector if _key(loop_vars[i]) in used]
    return lane_dependent[-1] if lane_dependent else None


def scalar_requests(vector: WarpAccess, scalar: WarpAccess) -> WarpAccess:
    """One scalar request of a vector copy code generation splits into one load a lane (scalarized
    or gathered): its own lines, wavefronts and bytes, with the sector efficiency of the whole vector
    group (the other lanes' loads hit the same lines in L1)."""
    return WarpAccess(
        useful_bytes=scalar.useful_bytes,
        global_sectors=vector.global_sectors * scalar.useful_bytes / vector.useful_bytes,
        global_lines=scalar.global_lines,
        shared_wavefronts=scalar.shared_wavefronts,
    )


def dtype_bytes(dtype) -> float:
    """Bytes of one element of a dtype such as "float16", "float32x4" or "bool"."""
    return _dtype_text_bytes(str(dtype))


@functools.lru_cache(maxsize=None)
def _dtype_text_bytes(text: str) -> float:
    if text == "bool":
        return 1.0
    base, _, lanes = text.partition("x")
    bits = int("".join(ch for ch in base if ch.isdigit()) or 32)
    return bits * int(lanes or 1) / 8.0
