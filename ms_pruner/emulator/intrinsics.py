"""The calls a lowered kernel makes as statements: tensor-core loads, MMAs and stores, cp.async,
barriers; each compiled to a closure over ``warp_ops`` with its operands' pointers resolved as CUDA
code generation resolves them (an offset counts elements of the pointer's type)."""

from __future__ import annotations

import numpy as np

from .expressions import dtype_of, key, op_name
from .memory import EmulationUnsupported, split_dtype
from .warp_ops import Fragment, ldmatrix, mma, wmma_fill, wmma_load, wmma_mma, wmma_store

LDMATRIX = ("ptx_legacy.ldmatrix", "ptx_ldmatrix")
MMA = ("ptx_legacy.mma", "ptx_mma")
CP_ASYNC = ("s_tir.cp_async_raw", "ptx_cp_async")
BARRIERS = ("tvm_storage_sync",)


def compile_intrinsic(compiler, call):
    """``f(run)`` doing what ``call`` does on every emulated thread."""
    name = op_name(call)
    args = list(call.args)
    if name in BARRIERS:
        return lambda run: None  # every emulated thread reaches it together
    if name in LDMATRIX:
        return _ldmatrix(compiler, args)
    if name in MMA:
        return _mma(compiler, args)
    if name in CP_ASYNC:
        return _cp_async(compiler, call)
    if name == "ptx_commit_group":
        return lambda run: run.copies.commit()
    if name == "ptx_wait_group":
        count = compiler.expr(args[0])
        return lambda run: run.copies.wait(int(count(run)))
    if name.startswith("tvm_") and name.endswith(("_fragment", "_matrix_sync", "mma_sync")):
        return _wmma(compiler, name, args)
    value = compiler.expr(call)
    return lambda run: value(run) and None


def pointer_at(compiler, data, offset=None, element_of=None):
    """``f(run) -> Pointer`` of ``data`` (a buffer's data or an access pointer) moved on by ``offset``
    elements of the pointer's type, or of ``element_of`` where given."""
    base = compiler.expr(data)
    if offset is None:
        return base
    size = np.dtype(element_of or pointee(data)).itemsize
    moved = compiler.expr(offset)
    return lambda run: base(run).plus(moved(run) * size)


def pointee(data):
    """numpy type a pointer expression points to: a buffer's elements, or an access pointer's type."""
    name = op_name(data) if type(data).__name__ == "Call" else ""
    if name == "buffer_data":
        return split_dtype(data.args[0].dtype)[0]
    if name == "tvm_access_ptr":
        return split_dtype(dtype_of(data.args[0]))[0]
    raise EmulationUnsupported(f"a pointer {type(data).__name__} {name}")


def _constant(arg):
    return arg.value if hasattr(arg, "value") else arg


def _ldmatrix(compiler, args):
    transposed, count, element = bool(_constant(args[0])), int(_constant(args[1])), str(_constant(args[2]))
    if element != ".b16":
        raise EmulationUnsupported(f"ldmatrix {element}")
    local = pointer_at(compiler, args[3], args[4])
    shared = pointer_at(compiler, args[5], args[6])
    return lambda run: ldmatrix(run, transposed, count, local(run), shared(run))


def _mma(compiler, args):
    shape, a_layout, b_layout = (str(_constant(a)) for a in args[:3])
    if (a_layout, b_layout) != ("row", "col"):
        raise EmulationUnsupported(f"mma.sync {a_layout}.{b_layout}")
    dtypes = tuple(split_dtype(str(_constant(a)))[0] for a in args[3:6])
    a, b, c = (pointer_at(compiler, args[i], args[i + 1]) for i in (6, 8, 10))
    return lambda run: mma(run, shape, dtypes, a(run), b(run), c(run))


def _cp_async(compiler, call):
    """``cp_async_raw(target, offset, source, offset, bytes[, guard])``: offsets count the call's type."""
    args = list(call.args)
    element = split_dtype(dtype_of(call))[0]
    target = pointer_at(compiler, args[0], args[1], element)
    source = pointer_at(compiler, args[2], args[3], element)
    size = int(_constant(args[4]))
    guard = compiler.expr(args[5]) if len(args) > 5 else None
    return lambda run: run.copies.issue(run, target(run), source(run), size, guard(run) if guard else None)


def _fragment(compiler, data, shape=None) -> Fragment:
    """The WMMA fragment ``data`` is the data of, shaped by ``shape`` or its ``fragment_shape``."""
    buffer = data.args[0]
    m, n, k = shape or compiler.fragment_shapes.get(key(buffer), (16, 16, 16))
    return Fragment.of(buffer.scope(), m, n, k, split_dtype(buffer.dtype)[0])


def _wmma(compiler, name, args):
    if name == "tvm_mma_sync":
        operands = [(compiler.expr(args[i]), _fragment(compiler, args[i]), compiler.expr(args[i + 1]))
                    for i in (0, 2, 4, 6)]
        return lambda run: wmma_mma(run, *[(p(run), f, i(run)) for p, f, i in operands])
    shape = tuple(int(_constant(a)) for a in args[1:4])
    fragment, data, index = _fragment(compiler, args[0], shape), compiler.expr(args[0]), compiler.expr(args[4])
    if name == "tvm_fill_fragment":
        value = compiler.expr(args[5])
        return lambda run: wmma_fill(run, data(run), fragment, index(run), value(run))
    memory, stride, layout = compiler.expr(args[5]), compiler.expr(args[6]), str(_constant(args[7]))
    move = {"tvm_load_matrix_sync": wmma_load, "tvm_store_matrix_sync": wmma_store}.get(name)
    if move is None:
        raise EmulationUnsupported(f"call {name}")
    return lambda run: move(run, data(run), fragment, index(run), memory(run), stride(run), layout)
