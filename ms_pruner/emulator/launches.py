"""The host side of a lowered module: which kernels it launches, in order, on which buffers.

TVM's packed entry function reads each argument's data pointer out of the call's arguments
(``tvm_struct_get``), may allocate intermediate global buffers (a GEMM's result before a separate
epilogue kernel) and launches each device kernel with ``call_ffi_kernel``. ``emulate`` follows it,
with the caller's arrays as the arguments, running each kernel on ``EmulationConfig``'s blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

import numpy as np

from .expressions import key, op_name
from .kernel import chosen_blocks, grid_of, launch, thread_extents
from .memory import EmulationUnsupported, Memory, Pointer, split_dtype

ARGUMENT_HANDLE, ARGUMENT_DATA = 15, 1  # tvm_struct_get fields: an argument's handle, a tensor's data


@dataclasses.dataclass(frozen=True)
class EmulationConfig:
    """How much of each launch to run: every block where its threads fit ``max_threads``, else
    ``blocks`` of them (the first, the last and others evenly between)."""

    blocks: int = 3
    max_threads: int = 1 << 12


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple
    block: tuple
    blocks_run: int


@dataclasses.dataclass
class EmulatedRun:
    launches: List[Launch]
    written: List[np.ndarray]  # per argument: the elements the emulated blocks stored, to be checked


@dataclasses.dataclass
class _Planned:
    name: str
    kernel: object
    memories: List[Memory]
    reads_intermediate: bool  # takes a buffer the host allocated (an epilogue after its GEMM)


def emulate(lowered, arrays: Sequence[np.ndarray], config: EmulationConfig = EmulationConfig()) -> EmulatedRun:
    """Run ``lowered`` (``builder.lowered_tir``'s output) on ``arrays``, its arguments in order; the
    arrays are written in place where the emulated blocks write them.

    A kernel that reads an intermediate buffer the host allocated runs on every block, and the outputs
    it computed from what the earlier kernel's emulated blocks left unwritten are found by running it
    once more on NaN there and zeros elsewhere (inputs and the kernel's own buffers zero too): those
    are not written, for the check; any other NaN is the kernel's own."""
    kernels = {gvar.name_hint: func for gvar, func in lowered.functions.items() if _is_kernel(func)}
    host = next(func for func in lowered.functions.values() if func.attrs and func.attrs.get("tirx.is_entry_func"))
    memories = [Memory.holding(f"argument {i}", a).track_writes() for i, a in enumerate(arrays)]
    walk = _HostWalk(kernels, memories)
    walk.walk(host.body)
    launches, blocks = [], []
    for planned in walk.planned:
        grid, block = grid_of(thread_extents(planned.kernel.body))
        limit = float("inf") if planned.reads_intermediate else config.max_threads
        blocks.append(chosen_blocks(grid, int(np.prod(block)), limit, config.blocks))
        launch(planned.kernel, [Pointer(m, 0, 0) for m in planned.memories], blocks[-1])
        launches.append(Launch(planned.name, grid, block, len(blocks[-1])))
    tainted = _tainted(walk, blocks, arrays)
    for memory, array in zip(memories, arrays):
        array.reshape(-1)[:] = memory.array(array.dtype, (array.size,))
    written = [m.written_elements(a.dtype, a.size).reshape(a.shape) & ~t for m, a, t in zip(memories, arrays, tainted)]
    return EmulatedRun(launches, written)


def _tainted(walk, blocks, arrays) -> List[np.ndarray]:
    """Per argument, the elements computed from intermediate elements no emulated block wrote."""
    unwritten = {id(m): m.written == 0 for m in walk.intermediates}
    later = [(p, b) for p, b in zip(walk.planned, blocks) if p.reads_intermediate]
    if not later or not any(np.any(u[:m.slot_bytes]) for m, u in zip(walk.intermediates, unwritten.values())):
        return [np.zeros(a.shape, dtype=bool) for a in arrays]
    shadows = {id(m): Memory(m.name, 1, m.slot_bytes, data=np.zeros_like(m.bytes)).track_writes()
               for m in walk.arguments}
    for m in walk.intermediates:
        shadows[id(m)] = Memory(m.name, 1, m.slot_bytes, data=np.where(unwritten[id(m)], 0xFF, 0).astype(np.uint8))
    for planned, chosen in later:
        launch(planned.kernel, [Pointer(shadows[id(m)], 0, 0) for m in planned.memories], chosen, poison=False)
    return [~np.isfinite(shadows[id(m)].array(a.dtype, a.shape)) if np.issubdtype(a.dtype, np.floating)
            else np.zeros(a.shape, dtype=bool) for m, a in zip(walk.arguments, arrays)]


def _is_kernel(func) -> bool:
    return bool(func.attrs and func.attrs.get("tirx.is_global_func"))


class _HostWalk:
    """Follows the host function's statements that bind buffers and launch kernels, and plans the
    launches in order."""

    def __init__(self, kernels: Dict, arguments: List[Memory]):
        self.kernels, self.arguments = kernels, arguments
        self.handles: Dict[int, int] = {}  # variable -> argument index
        self.buffers: Dict[int, Memory] = {}
        self.intermediates: List[Memory] = []
        self.planned: List[_Planned] = []

    def walk(self, stmt) -> None:
        kind = type(stmt).__name__
        if kind == "SeqStmt":
            for part in stmt.seq:
                self.walk(part)
        elif kind in ("AttrStmt", "For", "While"):
            self.walk(stmt.body)
        elif kind == "Bind":
            argument = _argument_of(stmt.value, {})
            if argument is not None:
                self.handles[key(stmt.var)] = argument
        elif kind == "DeclBuffer" and stmt.data is not None:
            memory = self._memory_of(stmt.data)
            if memory is not None:
                self.buffers[key(stmt.buffer)] = memory
        elif kind == "AllocBuffer":
            self._allocate(stmt.buffer)
        elif kind == "Evaluate" and type(stmt.value).__name__ == "Call" and op_name(stmt.value) == "call_ffi_kernel":
            self._plan(stmt.value)

    def _memory_of(self, data):
        if type(data).__name__ == "Call" and op_name(data) == "buffer_data":
            return self.buffers.get(key(data.args[0]))
        argument = _argument_of(data, self.handles, field=ARGUMENT_DATA)
        return self.arguments[argument] if argument is not None else None

    def _allocate(self, buffer) -> None:
        if buffer.scope() != "global":
            raise EmulationUnsupported(f"a host {buffer.scope()} buffer")
        element, lanes = split_dtype(buffer.dtype)
        size = int(np.prod([int(d) for d in buffer.shape])) * lanes * np.dtype(element).itemsize
        memory = Memory(buffer.name, 1, size, poison=True).track_writes()
        self.buffers[key(buffer)] = memory
        self.intermediates.append(memory)

    def _plan(self, call) -> None:
        name = str(call.args[0].value)
        kernel = self.kernels[name]
        memories = [self._memory_of(arg) for arg in call.args[1:1 + len(kernel.params)]]
        if any(m is None for m in memories):
            raise EmulationUnsupported(f"a launch of {name} on a buffer the host does not hold")
        reads = any(m is i for m in memories for i in self.intermediates) and bool(self.planned)
        self.planned.append(_Planned(name, kernel, memories, reads))


def _argument_of(expr, handles: Dict[int, int], field: int = ARGUMENT_HANDLE):
    """The argument index ``expr`` reads: ``tvm_struct_get(args, i, handle)`` for a handle, or
    ``tvm_struct_get(h, 0, data)`` of a handle variable ``h`` for its data; None otherwise."""
    for call in _calls(expr):
        if op_name(call) != "tvm_struct_get" or int(call.args[2].value) != field:
            continue
        source = call.args[0]
        if field == ARGUMENT_HANDLE and type(source).__name__ == "Var" and str(source.name) == "args":
            return int(call.args[1].value)
        if field == ARGUMENT_DATA and key(source) in handles:
            return handles[key(source)]
    return None


def _calls(expr):
    kind = type(expr).__name__
    if kind == "Call":
        yield expr
        for arg in expr.args:
            yield from _calls(arg)
    elif hasattr(type(expr), "a") and hasattr(type(expr), "b"):
        yield from _calls(expr.a)
        yield from _calls(expr.b)
