"""One lowered CUDA kernel (a device PrimFunc) run on chosen blocks of its grid, every thread at once.

The threads of the chosen blocks step through the kernel together, statement by statement: a
branch some threads take runs under a mask of them. Barriers therefore hold trivially, and what the
emulator checks is what the kernel computes from its schedule, tensor-core fragments and copies, not
whether it races. Buffers a kernel allocates start as NaN bytes, so a read of what nothing wrote
shows in the output.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from .expressions import ExpressionCompiler, any_active, key, with_mask
from .intrinsics import compile_intrinsic
from .memory import EmulationUnsupported, Memory, Pointer, Threads, split_dtype
from .warp_ops import AsyncCopies

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class Run:
    """The state of one launch: bindings, the active threads, the pending asynchronous copies."""

    def __init__(self, threads: Threads, thread_values: Dict[str, np.ndarray], poison: bool = True):
        self.threads = threads
        self.poison = poison  # the kernel's own buffers start as NaN bytes (else zeros)
        self.thread_values = thread_values
        self.env: Dict[int, object] = {}
        self.mask = None
        self.copies = AsyncCopies()

    def lookup(self, handle: int):
        try:
            return self.env[handle]
        except KeyError as err:
            raise EmulationUnsupported("a variable the kernel does not bind") from err

    def bind(self, handle: int, value) -> None:
        self.env[handle] = value

    def mask_for(self, shape):
        """The active threads, shaped to broadcast over an access of ``shape``."""
        mask = self.mask
        if mask is None or np.ndim(mask) < 2 or len(shape) < 2 or mask.shape[1] in (1, shape[1]):
            return mask
        return mask.any(axis=1, keepdims=True)


def thread_extents(stmt) -> Dict[str, int]:
    """Each thread tag the kernel launches with, and its extent."""
    found: Dict[str, int] = {}
    for node in _statements(stmt):
        if type(node).__name__ == "AttrStmt" and node.attr_key == "thread_extent":
            found[str(node.node.thread_tag)] = int(node.value)
    return found


def _statements(stmt):
    yield stmt
    kind = type(stmt).__name__
    children = list(stmt.seq) if kind == "SeqStmt" else \
        [stmt.then_case, stmt.else_case] if kind == "IfThenElse" else [getattr(stmt, "body", None)]
    for child in children:
        if child is not None:
            yield from _statements(child)


def grid_of(extents: Dict[str, int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    return tuple(extents.get(t, 1) for t in BLOCK_TAGS), tuple(extents.get(t, 1) for t in THREAD_TAGS)


def launch(kernel, pointers: Sequence[Pointer], blocks: Sequence[Tuple[int, int, int]], poison: bool = True) -> None:
    """Run ``kernel`` with its parameters at ``pointers`` on ``blocks`` (x, y, z) of its grid."""
    _, block_shape = grid_of(thread_extents(kernel.body))
    per_block = int(np.prod(block_shape))
    threads = Threads(len(blocks) * per_block, per_block)
    within = threads.index[:, 0] % per_block
    chosen = np.asarray(blocks, dtype=np.int64)[threads.block[:, 0]]
    values = {tag: chosen[:, axis:axis + 1].astype(np.int32) for axis, tag in enumerate(BLOCK_TAGS)}
    tx, ty, _ = block_shape
    for tag, value in zip(THREAD_TAGS, (within % tx, within // tx % ty, within // (tx * ty))):
        values[tag] = value[:, None].astype(np.int32)
    run = Run(threads, values, poison)
    for param, pointer in zip(kernel.params, pointers):
        run.bind(key(param), pointer)
    KernelCompiler().compile(kernel.body)(run)
    run.copies.drain()


def chosen_blocks(grid: Tuple[int, int, int], per_block: int, max_threads: int, count: int) -> List[tuple]:
    """Every block where the grid's threads fit ``max_threads``, else ``count`` of them spread
    over it: its first and last, and the others evenly between in launch order."""
    every = int(np.prod(grid))
    if every * per_block <= max_threads:
        picks = range(every)
    else:
        picks = sorted({int(round(i * (every - 1) / max(1, count - 1))) for i in range(count)})
    gx, gy, _ = grid
    return [(p % gx, p // gx % gy, p // (gx * gy)) for p in picks]


class KernelCompiler:
    """Compiles a kernel's statements to ``f(run)``."""

    def __init__(self):
        self.expressions = ExpressionCompiler()
        self.fragment_shapes: Dict[int, Tuple[int, int, int]] = {}

    def expr(self, e):
        return self.expressions.compile(e)

    def compile(self, stmt):
        kind = type(stmt).__name__
        method = getattr(self, "_" + kind.lower(), None)
        if method is None:
            raise EmulationUnsupported(f"statement {kind}")
        return method(stmt)

    def _seqstmt(self, stmt):
        parts = [self.compile(s) for s in stmt.seq]

        def seq(run):
            for part in parts:
                part(run)

        return seq

    def _bind(self, stmt):
        handle, value = key(stmt.var), self.expr(stmt.value)
        return lambda run: run.bind(handle, value(run))

    _letstmt = _bind

    def _assertstmt(self, _stmt):
        return lambda run: None

    def _declbuffer(self, stmt):
        if stmt.data is None:
            return lambda run: None
        handle, data = key(stmt.buffer), self.expr(stmt.data)
        return lambda run: run.bind(handle, data(run))

    def _allocbuffer(self, stmt):
        buffer = stmt.buffer
        scope, handle = buffer.scope(), key(buffer)
        element, lanes = split_dtype(buffer.dtype)
        size = int(np.prod([int(d) for d in buffer.shape])) * lanes * np.dtype(element).itemsize
        owner = {"shared": "block", "shared.dyn": "block", "local": "index"}.get(scope)
        if owner is None and scope.startswith("wmma."):
            owner = "warp"
        if owner is None:
            raise EmulationUnsupported(f"a {scope} buffer")

        def allocate(run):
            slots = {"block": run.threads.blocks, "index": run.threads.count, "warp": run.threads.warps}[owner]
            memory = Memory(f"{buffer.name} ({scope})", slots, size, poison=run.poison)
            run.bind(handle, Pointer(memory, getattr(run.threads, owner)))

        return allocate

    def _bufferstore(self, stmt):
        _, byte_offset, element = self.expressions.access(stmt.buffer, stmt.indices)
        value = self.expr(stmt.value)

        def store(run):
            pointer, offset = byte_offset(run)
            pointer.memory.store(element, pointer.slot, offset, value(run), run.mask_for(np.shape(offset)))

        return store

    def _for(self, stmt):
        handle, start, extent, body = key(stmt.loop_var), self.expr(stmt.min), self.expr(stmt.extent), \
            self.compile(stmt.body)
        step = self.expr(stmt.step) if stmt.step is not None else (lambda run: 1)

        def loop(run):
            first, count, stride = start(run), extent(run), step(run)
            if np.ndim(first) or np.ndim(stride):
                raise EmulationUnsupported("a loop whose start or step differs between threads")
            if np.ndim(count) == 0:
                for i in range(first, first + count * stride, stride):
                    run.bind(handle, i)
                    body(run)
                return
            outer = run.mask
            for trip in range(int(np.max(count))):
                run.mask = with_mask(outer, trip < count)
                run.bind(handle, first + trip * stride)
                body(run)
            run.mask = outer

        return loop

    def _ifthenelse(self, stmt):
        condition, then_case = self.expr(stmt.condition), self.compile(stmt.then_case)
        else_case = self.compile(stmt.else_case) if stmt.else_case is not None else (lambda run: None)

        def branch(run):
            c = condition(run)
            if np.ndim(c) == 0:
                (then_case if c else else_case)(run)
                return
            outer = run.mask
            for part, taken in ((then_case, c), (else_case, np.logical_not(c))):
                run.mask = with_mask(outer, taken)
                if any_active(run.mask):
                    part(run)
            run.mask = outer

        return branch

    def _attrstmt(self, stmt):
        body, attr = self.compile(stmt.body), stmt.attr_key
        if attr == "thread_extent":
            handle, tag = key(stmt.node.var), str(stmt.node.thread_tag)
            return lambda run: (run.bind(handle, run.thread_values[tag]), body(run))
        if attr == "async_commit_queue_scope":
            return lambda run: (body(run), run.copies.commit())
        if attr in ("async_wait_queue_scope", "async_wait_inflight_count"):
            count = self.expr(stmt.value) if attr == "async_wait_inflight_count" else None
            return lambda run: (run.copies.wait(_uniform_int(count(run))) if count else None, body(run))
        if attr == "fragment_shape":
            self.fragment_shapes[key(stmt.node)] = tuple(int(x) for x in str(stmt.value.value).split(","))
        return body

    def _evaluate(self, stmt):
        if type(stmt.value).__name__ != "Call":
            value = self.expr(stmt.value)
            return lambda run: value(run) and None
        return compile_intrinsic(self, stmt.value)


def _uniform_int(value) -> int:
    if np.ndim(value):
        raise EmulationUnsupported("a cp.async wait count that differs between threads")
    return int(value)

