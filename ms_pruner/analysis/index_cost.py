"""What a copy's global index costs per element: divisions by constants that are not powers of two.

A conv2d input tile is an im2col view of the padded input: each element's address takes floor
divisions and modulos of the fused copy loop by the image width, the channel count and the kernel
window (``(ax0 * 2 + tx // 16) % 3``, ``% 3136``, ``// 56``). The SASS of the H100 conv2d records
spends 60-70 instructions per element on them in rolled copy loops; a matmul with power-of-two
dimensions needs none (shifts and masks). docs/analyzer.md section 2.
"""

from __future__ import annotations

from typing import Dict, Sequence

import tvm_ffi
from tvm.ir.expr import Expr

from .access import _find_load, _key, as_lowered, guard_of

_DIVISIONS = ("FloorDiv", "FloorMod", "Div", "Mod")
_LEAVES = ("IntImm", "FloatImm", "StringImm")


def _odd_divisor(expr) -> bool:
    if type(expr.b).__name__ != "IntImm":
        return False
    divisor = abs(int(expr.b.value))
    return bool(divisor & (divisor - 1))


def _children(expr) -> list:
    if type(expr).__name__ == "Call":
        return [arg for arg in expr.args if isinstance(arg, Expr)]
    return [sub for sub in (getattr(expr, name, None) for name in ("a", "b", "value", "condition", "true_value",
                                                                     "false_value")) if isinstance(sub, Expr)]


def _collect_divisions(expr, own: set, found: set, memo: Dict[int, bool]) -> bool:
    """Add to ``found`` (structural hashes) the divisions by non-powers of two in ``expr`` whose
    dividend reads a variable of ``own``; whether ``expr`` reads one."""
    handle = _key(expr)
    if handle in memo:
        return memo[handle]
    kind = type(expr).__name__
    if kind == "Var":
        reads = handle in own
    elif kind in _LEAVES:
        reads = False
    else:
        reads_each = [_collect_divisions(sub, own, found, memo) for sub in _children(expr)]
        reads = any(reads_each)
        if kind in _DIVISIONS and reads_each and reads_each[0] and _odd_divisor(expr):
            found.add(int(tvm_ffi.structural_hash(expr)))
    memo[handle] = reads
    return reads


def _has_odd_division(expr, memo: set) -> bool:
    handle = _key(expr)
    if handle in memo or type(expr).__name__ in _LEAVES + ("Var",):
        return False
    memo.add(handle)
    if type(expr).__name__ in _DIVISIONS and _odd_divisor(expr):
        return True
    return any(_has_odd_division(sub, memo) for sub in _children(expr))


def address_divisions(realize, store, loops, loop_vars, own_start: int) -> int:
    """Divisions by constants that are not powers of two a copy's global index computes per
    element: what the index of an im2col tile costs (``(ax0 * 2 + tx // 16) % 3`` each element).

    Counted on the index and the bounds test of a padded tile as lowering's Simplify leaves them
    (loop ranges known, block vars replaced by their bindings), each distinct division once, as
    code generation's CSE shares them. A division that reads none of the copy's own serial loops is
    computed once per tile, outside the copy loop, and is not counted.
    """
    load = _find_load(store.value)
    if load is None:
        return 0
    if store.buffer.scope() == "global":
        buffer, indices = store.buffer, list(store.indices)
    elif load.source.scope() == "global":
        buffer, indices = load.source, list(load.indices)
    else:
        return 0
    guard = guard_of(store)
    tests = [guard.args[0]] if guard is not None else []
    seen: set = set()
    if not any(_has_odd_division(e, seen) for e in indices + tests + list(realize.iter_values)):
        return 0
    own = {_key(var) for var, loop in zip(loop_vars[own_start:], loops[own_start:]) if loop.thread is None}
    found: set = set()
    memo: Dict[int, bool] = {}
    _collect_divisions(lowered_flat_address(realize, loops, loop_vars, indices, buffer.shape), own, found, memo)
    for expr in tests:
        _collect_divisions(as_lowered(realize, loops, loop_vars, expr), own, found, memo)
    return len(found)


def element_divisions(exprs: Sequence, own_vars: Sequence) -> int:
    """Distinct divisions by non-powers of two in ``exprs`` whose dividend reads one of ``own_vars``
    (the loops of a copy that computes its index one element at a time), each counted once."""
    own = {_key(var) for var in own_vars}
    found: set = set()
    memo: Dict[int, bool] = {}
    for expr in exprs:
        _collect_divisions(expr, own, found, memo)
    return len(found)


_BINARY = ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Div", "Mod", "Min", "Max")


def _substituted(expr, values: Dict[int, object], memo: Dict[int, object]):
    """``expr`` with each variable of ``values`` (by handle) replaced, rebuilt node by node; an
    index of anything but arithmetic on variables and constants raises TypeError."""
    handle = _key(expr)
    if handle not in memo:
        kind = type(expr).__name__
        if kind == "Var":
            memo[handle] = values.get(handle, expr)
        elif kind in _LEAVES:
            memo[handle] = expr
        elif kind in _BINARY:
            memo[handle] = type(expr)(_substituted(expr.a, values, memo), _substituted(expr.b, values, memo))
        else:
            raise TypeError(kind)
    return memo[handle]


def lowered_flat_address(realize, loops, loop_vars, indices: Sequence, shape: Sequence):
    """The element offset of an access as lowering computes it, in lowering's order: the block's
    bindings substituted into each index (ConvertBlocksToOpaque), each index simplified on its own
    (Simplify), then flattened and simplified as one (FlattenBuffer).

    The order decides what folds. Over 2 x 196 blocks of 128 rows (the H100 conv2d layer's fastest
    record), the row index simplified on its own keeps ``(bx * 128 + s) // 3136`` beside
    ``(bx * 128 + s) % 3136``, which flattening folds into ``(bx * 128 + s) * 64``; simplified with
    the bindings only bound, as one expression, the same division becomes ``(bx * 2 + s // 64) //
    49`` first and no longer pairs with its modulo, so the address seemed to keep two divisions it
    does not have.
    """
    values = {_key(iv.var): bound for iv, bound in zip(realize.block.iter_vars, realize.iter_values)}
    memo: Dict[int, object] = {}
    try:
        substituted = [_substituted(index, values, memo) for index in indices]
    except TypeError:
        return as_lowered(realize, loops, loop_vars, flat_address(indices, shape))
    each = [as_lowered(realize, loops, loop_vars, index) for index in substituted]
    return as_lowered(realize, loops, loop_vars, flat_address(each, shape))


def flat_address(indices: Sequence, shape: Sequence):
    """The element offset a multi-dimensional access computes once lowering flattens its buffer.

    Flattened and simplified, an im2col row's ``(r // 3136) * 200704 + (r % 3136 // 56) * 3584 +
    (r % 56) * 64`` folds back into ``r * 64`` with no division left, but only while ``r`` is one
    expression: a block split whose inner extent is a multiple of the image width (7 x 56 blocks of
    128 rows: ``r = by * 7168 + s``) is simplified per dimension into ``by * 128 + s // 56`` first,
    and the divisions stay in every element's address (the H100 conv2d records 1 and 7 of Pruner's
    run, the same kernel over 7 x 56 and 1 x 392 blocks: 27.4 against 21.0 us; docs/analyzer.md).
    """
    flat, stride = None, 1
    for index, extent in zip(reversed(list(indices)), reversed(list(shape))):
        term = index if stride == 1 else index * stride
        flat = term if flat is None else flat + term
        stride = stride * (int(extent.value) if hasattr(extent, "value") else extent)
    return flat
