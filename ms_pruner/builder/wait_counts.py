"""Constant ``cp.async.wait_group`` counts where a software pipeline is deeper than its loop.

InjectSoftwarePipeline guards the waits of a pipeline's prologue with the predicates of the stages it
peels, and joins two predicates with a bitwise ``&`` of booleans. When the pipelined reduction loop
runs fewer times than the pipeline has stages (an mma candidate of a GEMM with few k tiles: 7 of 12
sampled ones of ``matmul:256x256x128:float16:float32`` on the H100), those predicates are the
constant False, but TVM's simplifier folds no bitwise operation of booleans, so the count stays
``if_then_else(False & False, 2, 0)`` and CUDA code generation, which bakes the count into the
instruction, stops ("cp_async_wait_group: immediate operands must become compile-time constants").

``PRUNER_TIR_PIPELINE`` is TVM's default TIR pipeline followed by a pass that reads
each such count's booleans as logic and simplifies it; a count that is still not a constant is left
as it was, and code generation says so as before.
"""

from __future__ import annotations

from typing import Callable, Optional

import tvm
from tvm import tirx
from tvm.s_tir.pipeline import default_s_tir_pipeline
from tvm.sym import Analyzer
from tvm.tirx.compilation_pipeline import PIPELINE_MAP, register_tir_pipeline

PRUNER_TIR_PIPELINE = "ms_pruner"
WAIT_COUNT = "async_wait_inflight_count"
_LOGIC = {"BitwiseAnd": tirx.And, "BitwiseOr": tirx.Or}


def register_pruner_pipeline() -> None:
    """Make ``PRUNER_TIR_PIPELINE`` a name ``tvm.compile``/``relax.build`` take (once a process)."""
    if PRUNER_TIR_PIPELINE not in PIPELINE_MAP:
        register_tir_pipeline(PRUNER_TIR_PIPELINE, _pruner_pipeline)


def _pruner_pipeline():
    lower, finalize_host, finalize_device = default_s_tir_pipeline()
    return tvm.transform.Sequential([lower, fold_wait_counts_pass()]), finalize_host, finalize_device


def fold_wait_counts_pass():
    @tirx.transform.prim_func_pass(opt_level=0, name="FoldWaitCounts")
    def fold(func, _mod, _ctx):
        body = rewrite_wait_counts(func.body, _folded)
        return func if body is None else func.with_body(body)

    return fold


def rewrite_wait_counts(stmt, rewrite: Callable) -> Optional[tirx.Stmt]:
    """``stmt`` with each wait count ``c`` replaced by ``rewrite(c)`` where that is not None; None
    where nothing changed."""
    kind = type(stmt).__name__
    again = lambda child: rewrite_wait_counts(child, rewrite)  # noqa: E731
    if kind == "SeqStmt":
        parts = [again(s) for s in stmt.seq]
        if all(p is None for p in parts):
            return None
        return tirx.SeqStmt([new if new is not None else old for new, old in zip(parts, stmt.seq)])
    if kind == "AttrStmt":
        body = again(stmt.body)
        value = rewrite(stmt.value) if stmt.attr_key == WAIT_COUNT else None
        if body is None and value is None:
            return None
        return tirx.AttrStmt(stmt.node, stmt.attr_key, value if value is not None else stmt.value,
                             body if body is not None else stmt.body)
    if kind == "For":
        body = again(stmt.body)
        if body is None:
            return None
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                        stmt.annotations, stmt.step)
    if kind == "IfThenElse":
        then_case = again(stmt.then_case)
        else_case = again(stmt.else_case) if stmt.else_case is not None else None
        if then_case is None and else_case is None:
            return None
        return tirx.IfThenElse(stmt.condition, then_case or stmt.then_case, else_case or stmt.else_case)
    if kind == "While":
        body = again(stmt.body)
        return None if body is None else tirx.While(stmt.condition, body)
    return None


def _folded(count) -> Optional[tirx.Expr]:
    """``count`` as an integer constant, or None where it is one already or cannot become one."""
    if isinstance(count, tirx.IntImm):
        return None
    folded = Analyzer().simplify(_as_logic(count))
    return folded if isinstance(folded, tirx.IntImm) else None


def _as_logic(expr):
    """``expr`` with bitwise and/or of booleans written as logical and/or, which the simplifier folds."""
    kind = type(expr).__name__
    if kind in _LOGIC and str(expr.ty) == "bool":
        return _LOGIC[kind](_as_logic(expr.a), _as_logic(expr.b))
    if kind == "Call":
        return tvm.ir.expr.Call(expr.op, [_as_logic(a) for a in expr.args], attrs=expr.attrs, ty_args=expr.ty_args,
                                ret_ty=expr.ty)
    if hasattr(type(expr), "a") and hasattr(type(expr), "b"):
        return type(expr)(_as_logic(expr.a), _as_logic(expr.b))
    if kind == "Not":
        return tirx.Not(_as_logic(expr.a))
    return expr
