"""The builder's chunked copies (builder/copy_lanes.py): each element moved by the thread and lane
MemHammer gives it, every swizzled copy a cp.async, and TVM's own code where a copy did not gather."""

import math
import operator

import pytest

from conftest import needs_nvcc, tiled_candidate, workload_space
from test_space_swizzle import (CONV, GEMM, _asynchronous_sources, _copy_predictions, _wide_rows_tiles,
                                _with_tiles)
from test_space_swizzle import COPY_LANES_ENV as LANES_ENV
_OPS = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "FloorDiv": operator.floordiv,
        "FloorMod": operator.mod, "Min": min, "Max": max, "LT": operator.lt, "LE": operator.le,
        "GT": operator.gt, "GE": operator.ge, "EQ": operator.eq, "NE": operator.ne,
        "And": lambda a, b: a and b, "Or": lambda a, b: a or b}


def _value(expr, env):
    """``expr`` evaluated with the integers of ``env``; a load as (buffer, indices)."""
    kind = type(expr).__name__
    if kind == "Var":
        return env[expr.name]
    if kind in ("IntImm", "FloatImm"):
        return expr.value
    if kind in _OPS:
        return _OPS[kind](_value(expr.a, env), _value(expr.b, env))
    if kind == "Not":
        return not _value(expr.a, env)
    if kind in ("BufferLoad", "TensorLoad"):
        return expr.source.name, tuple(_value(i, env) for i in expr.indices)
    if kind == "Call" and expr.op.name == "prim.if_then_else":
        condition, then, otherwise = expr.args
        return _value(then, env) if _value(condition, env) else _value(otherwise, env)
    raise TypeError(kind)


def _stores(stmt, env, out):
    """{(loop values, outermost first): (store indices, stored value)} over a copy's loop nest."""
    kind = type(stmt).__name__
    if kind == "For":
        for i in range(int(stmt.extent)):
            _stores(stmt.body, {**env, stmt.loop_var.name: i, "__path": env["__path"] + (i,)}, out)
    elif kind == "IfThenElse":
        if _value(stmt.condition, env):
            _stores(stmt.then_case, env, out)
    elif kind == "BufferStore":
        out[env["__path"]] = (tuple(_value(i, env) for i in stmt.indices), _value(stmt.value, env))
    else:
        raise TypeError(kind)
    return out


def _copy_blocks(mod):
    from ms_pruner.builder.copy_lanes import _find_permuted_copies

    found = []
    _find_permuted_copies(mod["main"].body, {}, found)
    return {entry[0].name_hint: entry[0] for entry in found}


def _gathered_draws():
    """A GEMM tiling whose B rows (768 elements over 4 warps) gather, and a conv2d draw whose padded
    input does."""
    _, target, space = workload_space(GEMM, "mma")
    gemm = _with_tiles(space, space.sample(1, seed=0)[0], _wide_rows_tiles(4))
    _, _, conv_space = workload_space(CONV, "mma")
    conv = conv_space.sample(1, seed=1)[0]
    return target, [gemm, conv]


def _without_split(monkeypatch):
    monkeypatch.setenv(LANES_ENV, "0")


@pytest.mark.slow
def test_a_chunked_copy_moves_each_element_by_the_thread_and_lane_memhammer_gives_it(tensor_intrinsics, monkeypatch):
    """For a gathering GEMM and conv2d copy: the chunked nest's store at (outer, threads, lane) is the
    original nest's at row-major position f = chunk * lanes + lane (``memhammer_coalesce.cc``), the
    conv2d's padding test included; chunks past the tile's end store nothing."""
    from ms_pruner.builder.copy_lanes import prepare_permuted_copies

    _, draws = _gathered_draws()
    for sch in draws:
        rewritten = prepare_permuted_copies(sch.mod)
        before = _copy_blocks(sch.mod)
        assert before and _copy_blocks(rewritten) == {}  # every permuted auto copy was written out
        rewritten = rewritten["main"]
        for name, block in before.items():
            env = {var.var.name: 1 for var in block.iter_vars}
            original = _stores(block.body, {**env, "__path": ()}, {})
            sizes = [max(p[d] for p in original) + 1 for d in range(len(next(iter(original))))]
            chunked = _stores(_block_named(rewritten.body, name).body, {**env, "__path": ()}, {})
            lanes, thread_extents = 8, _thread_extents(rewritten.body, name)
            assert len(chunked) == len(original) == math.prod(sizes)
            for (outer, *threads, lane), store in chunked.items():
                chunk = outer
                for thread, extent in zip(threads, thread_extents):
                    chunk = chunk * extent + thread
                position, flat = [], chunk * lanes + lane
                for size in reversed(sizes):
                    position.insert(0, flat % size)
                    flat //= size
                assert store == original[tuple(position)]


def _block_named(stmt, name):
    kind = type(stmt).__name__
    if kind == "SBlock" and stmt.name_hint == name:
        return stmt
    children = {"SBlockRealize": lambda s: [s.block], "SBlock": lambda s: [s.body], "For": lambda s: [s.body],
                "SeqStmt": lambda s: list(s.seq), "IfThenElse": lambda s: [s.then_case]}
    for child in children.get(kind, lambda s: [s.body] if hasattr(s, "body") else [])(stmt):
        found = _block_named(child, name)
        if found is not None:
            return found
    return None


def _thread_extents(func_body, name):
    """The chunked nest's thread loop extents, outermost first."""
    loop, extents = _block_named(func_body, name).body.body, []
    while type(loop).__name__ == "For" and loop.thread_binding is not None:
        extents.append(int(loop.extent))
        loop = loop.body
    return extents


@pytest.mark.slow
def test_every_swizzled_copy_becomes_a_cp_async_and_the_analyzer_calls_none_synchronous(tensor_intrinsics,
                                                                                          monkeypatch):
    """Copies that TVM's own lowering leaves synchronous (switch off) are cp.async once split by chunk,
    and the analyzer, reading the same switch, calls none of them gathered."""
    from ms_pruner.builder.worker import lowered_tir

    target, draws = _gathered_draws()
    for sch in draws:
        _without_split(monkeypatch)
        gathered = _copy_predictions(sch)
        tvm_async = _asynchronous_sources(lowered_tir(sch.mod, target))
        assert any(gathered.values()) and not {name for name, g in gathered.items() if g} & tvm_async
        monkeypatch.delenv(LANES_ENV)
        assert not any(_copy_predictions(sch).values())
        assert set(gathered) <= _asynchronous_sources(lowered_tir(sch.mod, target))


@pytest.mark.slow
@needs_nvcc
def test_a_copy_that_did_not_gather_compiles_to_the_same_cuda_either_way(tensor_intrinsics, monkeypatch):
    """On GEMM draws whose copies TVM lowers to cp.async by itself, the chunked copy is the same code:
    the CUDA source is identical with the split and without it."""
    from ms_pruner.builder import cuda_sources

    _, target, space = workload_space(GEMM, "mma")
    compared = 0
    for sch in space.sample(4, seed=0, max_attempts=160):
        _without_split(monkeypatch)
        if any(_copy_predictions(sch).values()):
            continue
        tvm_own = cuda_sources(sch.mod, target, use_nvcc=False)
        monkeypatch.delenv(LANES_ENV)
        assert cuda_sources(sch.mod, target, use_nvcc=False) == tvm_own
        compared += 1
    assert compared >= 2


@pytest.mark.slow
def test_an_int64_indexed_model_gemm_lowers_with_the_split_where_tvms_own_copies_fail(tensor_intrinsics,
                                                                                         monkeypatch):
    """BERT's FFN GEMM as Relax imports it indexes in int64 under int32 copy loops. TVM's own lowering
    of the gathered copies fails in CUDA code generation for some of its mma draws (no type name for
    the int64 8-lane vector); split by chunk in the threads' index type, every draw lowers."""
    from ms_pruner.builder import lower_candidate
    from ms_pruner.models import extract_tasks, get_model, import_torch_model
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.space import tuning_space

    module, example, spec = get_model("bert-layer")
    mod = import_torch_model(module, example, nhwc=spec.nhwc, mixed_precision=True)
    target = get_gpu_spec("h100").target()
    task = next(t for t in extract_tasks(mod, target) if t.task_name == "fused_matmul4_cast13_add3")
    _, task_target, generator = tuning_space("mma", task.dispatched[0], target)
    draws = DesignSpace(task.dispatched[0], task_target, generator).sample(8, seed=1)
    failures = {}
    for split in ("0", "1"):
        monkeypatch.setenv(LANES_ENV, split)
        failures[split] = 0
        for sch in draws:
            try:
                lower_candidate(sch.mod, task_target)
            except Exception:  # pylint: disable=broad-except
                failures[split] += 1
    assert len(draws) == 8 and failures["0"] > 0 and failures["1"] == 0, failures


@pytest.mark.slow
def test_a_transposed_weight_copy_is_never_a_cp_async_and_the_analyzer_calls_it_synchronous(tensor_intrinsics,
                                                                                              monkeypatch):
    """BERT's FFN GEMM stores its weights n-major; TVM's m16n8k8 compute reads a k-major shared B
    tile, so the lanes of a vector of that copy read a weight column, 768 elements apart.
    InjectPTXAsyncCopy would make each such vector one 16-byte cp.async from its first element's
    address, copying part of a weight row instead (a wrong kernel). The builder copies it one element
    at a time, with the split on or off, and keeps the activation copy a cp.async where it splits it
    (its rows of 96 elements gather in TVM's own lowering); the analyzer calls the weight copy
    synchronous."""
    from ms_pruner.builder.copy_lanes import lane_stride
    from ms_pruner.builder.worker import lowered_tir

    _, target, space = workload_space("dense_bias:2048x3072x768:float16:float32", "mma")
    sch = tiled_candidate(space, "m16n8k8", 2, [[4, 4, 4, 1, 2], [16, 1, 2, 1, 12], [8, 3, 4]])
    strides = {name: lane_stride(block) for name, block in _copy_blocks(sch.mod).items()}
    assert strides == {"A_reindex_shared.dyn": 1, "W_reindex_shared.dyn": 768}
    assert _copy_predictions(sch) == {"A": False, "W": True}
    assert _asynchronous_sources(lowered_tir(sch.mod, target)) == {"A"}
    _without_split(monkeypatch)
    assert "W" not in _asynchronous_sources(lowered_tir(sch.mod, target))
