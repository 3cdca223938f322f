"""What the builder's rewrites of a scheduled module share: each PrimFunc rewritten, an expression rebuilt."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir.expr import TensorLoad

BINARY_NODES = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod, tirx.Min, tirx.Max,
           tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or)
LOADS = ("BufferLoad", "TensorLoad")


def with_rewritten_funcs(mod: tvm.IRModule, rewrite: Callable) -> tvm.IRModule:
    """``mod`` with each PrimFunc replaced by ``rewrite(func)`` where that is not None; ``mod``
    itself where nothing is."""
    updates = {gvar: new for gvar, func in mod.functions.items()
               if isinstance(func, tirx.PrimFunc) and (new := rewrite(func)) is not None}
    if not updates:
        return mod
    mod = mod.clone()
    for gvar, func in updates.items():
        mod.update_func(gvar, func)
    return mod


def accessed_buffers(node) -> Tuple[List, List]:
    """(buffers stored to, buffers loaded from) under ``node``, in walk order, repeats kept. One
    catch-all callback: tvm_ffi reads a list of two (type, callback) entries as one grouped entry."""
    stored, loaded = [], []

    def visit(child):
        if isinstance(child, tirx.BufferStore):
            stored.append(child.buffer)
        elif isinstance(child, TensorLoad):
            loaded.append(child.source)

    tvm_ffi.structural_walk(node, visit)
    return stored, loaded


def rebuilt(expr, on_var: Callable, on_division: Optional[Callable] = None, on_load: Optional[Callable] = None,
            memo: Optional[Dict] = None):
    """``expr`` rebuilt bottom-up: each variable through ``on_var``, each rebuilt floor division or
    modulo through ``on_division``, each load through ``on_load(load, rebuilt indices)`` (by default
    the same buffer at those indices). An expression kind the rewrites never meet raises TypeError."""
    memo = {} if memo is None else memo
    key = expr.__hash__()
    if key in memo:
        return memo[key]

    def again(child):
        return rebuilt(child, on_var, on_division, on_load, memo)

    if isinstance(expr, tirx.Var):
        out = on_var(expr)
    elif isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        out = expr
    elif isinstance(expr, BINARY_NODES):
        out = type(expr)(again(expr.a), again(expr.b))
        if on_division is not None and isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)):
            out = on_division(out)
    elif isinstance(expr, tirx.Not):
        out = tirx.Not(again(expr.a))
    elif isinstance(expr, tirx.Cast):
        out = tirx.Cast(expr.ty, again(expr.value))
    elif isinstance(expr, tirx.Select):
        out = tirx.Select(*(again(e) for e in (expr.condition, expr.true_value, expr.false_value)))
    elif type(expr).__name__ in LOADS:
        indices = [again(i) for i in expr.indices]
        out = on_load(expr, indices) if on_load is not None else tirx.BufferLoad(expr.source, indices)
    elif isinstance(expr, tvm.ir.expr.Call):
        out = tvm.ir.expr.Call(expr.op, [again(a) for a in expr.args], attrs=expr.attrs, ty_args=expr.ty_args,
                               ret_ty=expr.ty)
    else:
        raise TypeError(type(expr).__name__)
    memo[key] = out
    return out
