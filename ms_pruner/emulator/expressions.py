"""Lowered TIR expressions compiled once to Python closures over every emulated thread at once.

A value is a Python int or bool, or a numpy scalar, where all threads agree, else a numpy array of
shape (threads, lanes); a vector all threads agree on has shape (1, lanes). A pointer is a
``memory.Pointer``. ``if_then_else`` evaluates each branch only for the threads that take it (a
padded input's bounds test guards a load that would leave the buffer), as CUDA does.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, Dict

import numpy as np

from .memory import EmulationUnsupported, Pointer, split_dtype
from .warp_ops import SHUFFLES, shuffle

Closure = Callable[["object"], object]


def _int_div(a, b):
    """C division of integers (truncated), TIR's Div."""
    q = np.abs(a) // np.abs(b)
    return np.where(np.sign(a) * np.sign(b) < 0, -q, q) if np.ndim(q) else (-q if (a < 0) != (b < 0) else q)


def _floor_div(a, b):
    return a // b if _integral(a) and _integral(b) else np.floor(np.divide(a, b))


def _integral(value) -> bool:
    return isinstance(value, (bool, int)) or np.issubdtype(np.asarray(value).dtype, np.integer) \
        or np.asarray(value).dtype == np.bool_


BINARY = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "FloorDiv": _floor_div,
    "FloorMod": lambda a, b: a % b if _integral(a) and _integral(b) else np.mod(a, b),
    "Div": lambda a, b: _int_div(a, b) if _integral(a) and _integral(b) else np.divide(a, b),
    "Mod": lambda a, b: a - b * _int_div(a, b) if _integral(a) and _integral(b) else np.fmod(a, b),
    "Min": np.minimum, "Max": np.maximum, "EQ": operator.eq, "NE": operator.ne, "LT": operator.lt,
    "LE": operator.le, "GT": operator.gt, "GE": operator.ge, "And": np.logical_and, "Or": np.logical_or,
    "BitwiseAnd": operator.and_, "BitwiseOr": operator.or_, "BitwiseXor": operator.xor,
    "LShift": operator.lshift, "RShift": operator.rshift,
}
MATH = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
        "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf, otypes=[np.float64]),
        "pow": np.power, "likely": lambda x: x, "bitwise_and": operator.and_, "bitwise_or": operator.or_,
        "bitwise_xor": operator.xor, "shift_left": operator.lshift, "shift_right": operator.rshift,
        "bitwise_not": operator.invert}


def op_name(call) -> str:
    """``call``'s operator without its namespace: ``tirx.ptx_legacy.mma`` -> ``ptx_legacy.mma``."""
    name = call.op.name if hasattr(call.op, "name") else str(call.op)
    return name.split(".", 1)[1] if name.startswith(("tirx.", "prim.")) else name


def dtype_of(expr) -> str:
    return str(expr.ty)


def key(node) -> int:
    """A variable's or buffer's identity across the Python objects that wrap it."""
    return node.__hash__()


def with_mask(mask, condition):
    """The threads of ``mask`` (None: all) for which ``condition`` holds."""
    return condition if mask is None else np.logical_and(mask, condition)


def any_active(mask) -> bool:
    return mask is None or bool(np.any(mask))


class ExpressionCompiler:
    """Compiles expressions of one kernel; ``compile(expr)`` gives ``f(run) -> value``."""

    def __init__(self):
        self._memo: Dict[int, Closure] = {}

    def compile(self, expr) -> Closure:
        handle = key(expr)
        if handle not in self._memo:
            self._memo[handle] = self._compile(expr)
        return self._memo[handle]

    def _compile(self, expr) -> Closure:
        kind = type(expr).__name__
        if kind in ("IntImm", "FloatImm", "StringImm"):
            value = _constant(expr)
            return lambda run: value
        if kind in ("Var", "SizeVar"):
            handle = key(expr)
            return lambda run: run.lookup(handle)
        if kind in BINARY:
            fn, a, b = BINARY[kind], self.compile(expr.a), self.compile(expr.b)
            return lambda run: fn(a(run), b(run))
        method = getattr(self, "_" + kind.lower(), None)
        if method is None:
            raise EmulationUnsupported(f"expression {kind}")
        return method(expr)

    def _not(self, expr):
        a = self.compile(expr.a)
        return lambda run: np.logical_not(a(run))

    def _select(self, expr):
        c, t, f = (self.compile(e) for e in (expr.condition, expr.true_value, expr.false_value))
        return lambda run: np.where(c(run), t(run), f(run))

    def _cast(self, expr):
        target, _ = split_dtype(dtype_of(expr))
        value = self.compile(expr.value)
        return lambda run: cast(value(run), target)

    def _ramp(self, expr):
        base, stride = self.compile(expr.base), self.compile(expr.stride)
        steps = np.arange(int(expr.lanes), dtype=np.int64)[None, :]
        return lambda run: base(run) + stride(run) * steps

    def _broadcast(self, expr):
        value, lanes = self.compile(expr.value), int(expr.lanes)

        def broadcast(run):
            v = value(run)
            return np.full((1, lanes), v) if np.ndim(v) == 0 else np.broadcast_to(v, (v.shape[0], lanes))

        return broadcast

    def _shuffle(self, expr):
        vectors = [self.compile(v) for v in expr.vectors]
        indices = [int(i) for i in expr.indices]

        def shuffle(run):
            parts = np.broadcast_arrays(*[np.atleast_2d(v(run)) for v in vectors])
            return np.concatenate(parts, axis=1)[:, indices]

        return shuffle

    def _let(self, expr):
        handle, value, body = key(expr.var), self.compile(expr.value), self.compile(expr.body)

        def let(run):
            run.bind(handle, value(run))
            return body(run)

        return let

    def _tensorload(self, expr):
        return self.access(expr.source, expr.indices)[0]

    def access(self, buffer, indices):
        """(load(run), element offsets(run) -> byte offsets) of ``buffer[indices]``."""
        element, lanes = split_dtype(buffer.dtype)
        itemsize = np.dtype(element).itemsize
        handle = key(buffer)
        flat = self.flat_index(buffer, indices)
        within = np.arange(lanes, dtype=np.int64)

        def byte_offset(run):
            pointer = run.lookup(handle)
            index = np.asarray(flat(run), dtype=np.int64)
            if lanes > 1:
                index = (index[..., None] * lanes + within).reshape(index.shape[0] if index.ndim else 1, -1)
            return pointer, pointer.offset + index * itemsize

        def load(run):
            pointer, offset = byte_offset(run)
            return pointer.memory.load(element, pointer.slot, offset, run.mask_for(np.shape(offset)))

        return load, byte_offset, element

    def flat_index(self, buffer, indices) -> Closure:
        parts = [self.compile(i) for i in indices]
        offset = buffer.elem_offset
        extra = int(offset.value) if type(offset).__name__ == "IntImm" else None
        if extra is None:
            raise EmulationUnsupported(f"buffer {buffer.name} with a symbolic element offset")
        if len(parts) == 1:
            only = parts[0]
            return (lambda run: only(run) + extra) if extra else only
        strides = [int(np.prod([int(d) for d in buffer.shape[i + 1:]])) for i in range(len(parts))]
        return lambda run: sum(p(run) * s for p, s in zip(parts, strides)) + extra

    def _call(self, expr):
        name = op_name(expr)
        args = list(expr.args)
        if name == "buffer_data":
            handle = key(args[0])
            return lambda run: run.lookup(handle)
        if name == "if_then_else":
            return self._if_then_else(*(self.compile(a) for a in args))
        if name == "tvm_access_ptr":
            element, _ = split_dtype(dtype_of(args[0]))
            data, offset = self.compile(args[1]), self.compile(args[2])
            size = np.dtype(element).itemsize
            return lambda run: data(run).plus(offset(run) * size)
        if name == "address_of":
            _, byte_offset, _ = self.access(args[0].source, args[0].indices)
            return lambda run: _pointer_at(*byte_offset(run))
        if name == "reinterpret":
            target, _ = split_dtype(dtype_of(expr)) if dtype_of(expr) != "handle" else (None, 1)
            value = self.compile(args[0])
            return lambda run: value(run) if target is None else np.asarray(value(run)).view(target)
        if name == "tvm_warp_activemask":
            return lambda run: np.uint32(0xFFFFFFFF)  # a shuffle's mask: the emulated lanes run together
        if name in SHUFFLES:
            value, lane, width = (self.compile(a) for a in args[1:4])
            return lambda run: shuffle(run.threads, name, value(run), lane(run), width(run))
        if name in MATH:
            fn, parts = MATH[name], [self.compile(a) for a in args]
            out, _ = split_dtype(dtype_of(expr))
            return lambda run: cast(fn(*(p(run) for p in parts)), out)
        raise EmulationUnsupported(f"call {name}")

    @staticmethod
    def _if_then_else(condition, then_value, else_value):
        def choose(run):
            c = condition(run)
            if np.ndim(c) == 0:
                return then_value(run) if c else else_value(run)
            outer = run.mask
            values = []
            for branch, taken in ((then_value, c), (else_value, np.logical_not(c))):
                run.mask = with_mask(outer, taken)
                values.append(branch(run) if any_active(run.mask) else 0)
            run.mask = outer
            return np.where(c, values[0], values[1])

        return choose


def _pointer_at(pointer: Pointer, byte_offset) -> Pointer:
    return Pointer(pointer.memory, pointer.slot, byte_offset)


def _constant(expr):
    if type(expr).__name__ == "StringImm":
        return str(expr.value)
    element, _ = split_dtype(dtype_of(expr))
    if element is np.bool_:
        return bool(expr.value)
    if np.issubdtype(element, np.integer):
        return int(expr.value)
    return element(expr.value)


def cast(value, target):
    """``value`` as numpy type ``target``, keeping its shape (C's conversions: floats truncate)."""
    if target is np.bool_:
        return np.not_equal(value, 0)
    if np.ndim(value) == 0:
        return target(value)
    return np.asarray(value).astype(target)
