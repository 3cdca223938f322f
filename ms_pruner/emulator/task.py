"""A tuning task's PrimFunc (a Relax model's fused operator, say) as a workload the emulator checks.

A workload spec knows its exact result (numpy, float64); a task extracted from a model does not, so
its result here is the unscheduled PrimFunc compiled for this machine's CPU, run on the same random
inputs: the same arithmetic in the same dtypes (fp16 operands, the casts the model's mixed precision
put in), computed without any schedule, against which a scheduled candidate's kernels are held.
"""

from __future__ import annotations

import collections
from typing import List, Sequence, Tuple

import numpy as np
import tvm
import tvm_ffi

from ..builder.tir_rebuild import accessed_buffers
from ..errors import UserError
from ..workloads.spec import OUTPUT_TOLERANCE

FLOAT_DTYPES = ("float16", "float32", "float64")
POSITIVE_ARGUMENT_OPS = ("tirx.sqrt", "tirx.rsqrt", "tirx.log", "tirx.log2", "tirx.log10")
POSITIVE_RANGE = (0.25, 1.25)


class PrimFuncWorkload:
    """``func``'s parameters as Relax's ``call_tir`` passes them: inputs first, one output last
    (``random_inputs``, ``output_shape``, ``out_dtype``, ``reference`` and ``tolerance``, as
    ``workloads.Workload`` offers them). Inputs are uniform in [-1, 1), or in POSITIVE_RANGE where a
    square root or logarithm is taken of what they compute (a batch norm's variance): a NaN there
    would vanish in the reference's max (as in CUDA's fmaxf) but not in the emulator's, which keeps
    NaN as its mark of memory read before it was written. A task with an integer input (an
    embedding's indices) or with more than one output is refused: random indices would read outside
    the table, and the emulator checks one output."""

    def __init__(self, func, name: str = "task"):
        self.func, self.name = func, name
        self.params = list(func.params)
        stored, _ = accessed_buffers(func.body)
        outputs = [b.name for b in self.params if any(b.same_as(s) for s in stored)]
        if outputs != [self.params[-1].name]:
            raise UserError(f"task '{name}' writes the parameters {outputs or 'none'}; the emulator checks "
                            "one output, the last parameter")
        for buffer in self.params:
            if str(buffer.dtype) not in FLOAT_DTYPES:
                raise UserError(f"task '{name}' takes '{buffer.name}' of dtype {buffer.dtype}; "
                                "random inputs need floating-point parameters")
        self.out_dtype = str(self.params[-1].dtype)
        self.positive_inputs = _positive_argument_sources(func) & {b.name for b in self.params[:-1]}
        self._compiled = None

    def random_inputs(self, seed: int = 0) -> List[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.uniform(*(POSITIVE_RANGE if b.name in self.positive_inputs else (-1.0, 1.0)),
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
        return OUTPUT_TOLERANCE.get(self.out_dtype, 1e-3)


def _shape(buffer) -> Tuple[int, ...]:
    return tuple(int(x) for x in buffer.shape)


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
