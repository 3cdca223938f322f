"""A tuning task's PrimFunc (a Relax model's fused operator, say) as a workload the emulator checks.

A workload spec knows its exact result (numpy, float64); a task extracted from a model does not, so
its result here is the unscheduled PrimFunc compiled for this machine's CPU, run on the same random
inputs: the same arithmetic in the same dtypes (fp16 operands, the casts the model's mixed precision
put in), computed without any schedule, against which a scheduled candidate's kernels are held.
"""

from __future__ import annotations

import collections
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tvm
import tvm_ffi
from tvm.ir.expr import TensorLoad

from ..builder.tir_rebuild import accessed_buffers
from ..errors import UserError
from ..workloads.spec import OUTPUT_TOLERANCE

FLOAT_DTYPES = ("float16", "float32", "float64")
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
PLAIN_INTEGER_RANGE = 128  # an integer input no index reads: values in [0, 128), valid in every integer type
POSITIVE_ARGUMENT_OPS = ("tirx.sqrt", "tirx.rsqrt", "tirx.log", "tirx.log2", "tirx.log10")
POSITIVE_RANGE = (0.25, 1.25)


class PrimFuncWorkload:
    """``func``'s parameters as Relax's ``call_tir`` passes them: inputs first, one output last
    (``random_inputs``, ``output_shape``, ``out_dtype``, ``reference`` and ``tolerance``, as
    ``workloads.Workload`` offers them). Inputs are uniform in [-1, 1), or in POSITIVE_RANGE where a
    square root or logarithm is taken of what they compute (a batch norm's variance): a NaN there
    would vanish in the reference's max (as in CUDA's fmaxf) but not in the emulator's, which keeps
    NaN as its mark of memory read before it was written. An integer input that indexes a buffer
    (an embedding's token ids, the 0-d index of a ``take``) draws from [0, the smallest extent it
    indexes), one no index reads from [0, PLAIN_INTEGER_RANGE). A task that computes an index from an
    integer input (``table[ids[i] + 1]``), or that writes more than one output, is refused: no random
    values are safe for the first, and the emulator checks one output."""

    def __init__(self, func, name: str = "task"):
        self.func, self.name = func, name
        self.params = list(func.params)
        stored, _ = accessed_buffers(func.body)
        outputs = [b.name for b in self.params if any(b.same_as(s) for s in stored)]
        if outputs != [self.params[-1].name]:
            raise UserError(f"task '{name}' writes the parameters {outputs or 'none'}; the emulator checks "
                            "one output, the last parameter")
        for buffer in self.params:
            if str(buffer.dtype) not in FLOAT_DTYPES + INTEGER_DTYPES:
                raise UserError(f"task '{name}' takes '{buffer.name}' of dtype {buffer.dtype}; "
                                "random inputs need integer or floating-point parameters")
        self.out_dtype = str(self.params[-1].dtype)
        self.positive_inputs = _positive_argument_sources(func) & {b.name for b in self.params[:-1]}
        self.index_ranges = _index_ranges(func, [b for b in self.params[:-1] if str(b.dtype) in INTEGER_DTYPES], name)
        self._compiled = None

    def random_inputs(self, seed: int = 0) -> List[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.integers(0, self.index_ranges[b.name], size=_shape(b)).astype(str(b.dtype))
                if b.name in self.index_ranges else
                rng.uniform(*(POSITIVE_RANGE if b.name in self.positive_inputs else (-1.0, 1.0)),
                            size=_shape(b)).astype(str(b.dtype)) for b in self.params[:-1]]

    def output_shape(self) -> Tuple[int, ...]:
        return _shape(self.params[-1])

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The unscheduled PrimFunc, compiled for the CPU once, run on ``inputs``."""
        if self._compiled is None:
            self._compiled = tvm.compile(tvm.IRModule({"main": self.func}), target="llvm")
        device = tvm.cpu()
        out = tvm.runtime.tensor(np.zeros(self.output_shape(), dtype=self.out_dtype), device)
        self._compiled(*[tvm.runtime.tensor(x, device) for x in inputs], out)
        exact = out.numpy().astype(np.float64)
        if not np.all(np.isfinite(exact)):
            raise UserError(f"task '{self.name}' gives non-finite results on its random inputs "
                            "(an exponential that overflows, say); nothing to hold its kernels against")
        return exact

    @property
    def tolerance(self) -> float:
        return 0.0 if self.out_dtype in INTEGER_DTYPES else OUTPUT_TOLERANCE.get(self.out_dtype, 1e-3)


def _shape(buffer) -> Tuple[int, ...]:
    return tuple(int(x) for x in buffer.shape)


def _index_ranges(func, integers: List, name: str) -> Dict[str, int]:
    """Each of ``integers``' names -> the exclusive bound of its random values: the smallest extent
    of a buffer axis it indexes as it is (through casts), PLAIN_INTEGER_RANGE where no index reads
    it; a UserError where an index computes something else from it."""
    wanted = {b.name for b in integers}
    extents, computed = collections.defaultdict(list), set()

    def visit(node):  # one catch-all callback (tir_rebuild.accessed_buffers says why)
        if not isinstance(node, (TensorLoad, tvm.tirx.BufferStore)):
            return
        buffer = node.source if isinstance(node, TensorLoad) else node.buffer
        for extent, index in zip(buffer.shape, node.indices):
            direct = _uncast(index)
            if isinstance(direct, TensorLoad) and direct.source.name in wanted:
                extents[direct.source.name].append(int(extent))
            else:
                computed.update(_loaded_names(index) & wanted)

    tvm_ffi.structural_walk(func.body, visit)
    if computed:
        raise UserError(f"task '{name}' computes an index from its integer input '{sorted(computed)[0]}'; "
                        "no random values are known to stay in range")
    ranges = {n: min(extents[n]) if extents[n] else PLAIN_INTEGER_RANGE for n in sorted(wanted)}
    empty = [n for n, bound in ranges.items() if bound < 1]
    if empty:
        raise UserError(f"task '{name}' indexes an empty axis with its integer input '{empty[0]}'")
    return ranges


def _uncast(expr):
    while isinstance(expr, tvm.tirx.Cast):
        expr = expr.value
    return expr


def _loaded_names(expr) -> set:
    return {buffer.name for buffer in accessed_buffers(expr)[1]}


def _positive_argument_sources(func) -> set:
    """Names of the buffers a POSITIVE_ARGUMENT_OPS argument is computed from, through every store
    that leads to it."""
    sources, wanted = collections.defaultdict(set), set()

    def visit(node):  # one catch-all callback (tir_rebuild.accessed_buffers says why)
        if isinstance(node, tvm.tirx.BufferStore):
            sources[node.buffer.name] |= _loaded_names(node.value)
        elif isinstance(node, tvm.ir.Call) and getattr(node.op, "name", None) in POSITIVE_ARGUMENT_OPS:
            wanted.update(_loaded_names(node.args[0]))

    tvm_ffi.structural_walk(func.body, visit)
    frontier = set(wanted)
    while frontier:
        frontier = set().union(*(sources[name] for name in frontier)) - wanted
        wanted |= frontier
    return wanted
