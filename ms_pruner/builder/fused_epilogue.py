"""The mma family's elementwise epilogue (bias, ReLU) written by the GEMM kernel from its registers.

TVM's mma rule stores the accumulator fragments with an ``auto_copy`` block (``write_at``) that
LowerAutoCopy lowers as a plain copy only, so the GEMM's consumer cannot be inlined into it, and
the space keeps the consumer a kernel of its own (``space/epilogue.py``): the GEMM writes its
result to global memory and the epilogue kernel reads it back with the bias, a second pass over the
output (2048x3072 fp32: 25 MB written, read and written again) and a second launch.

``fuse_fragment_epilogues`` rewrites the schedule before TVM lowers it: the store block writes the
consumer's output itself, each lane the accumulator elements it holds (m16n8k8's C layout: rows
``8 b + lane / 4``, columns ``2 (lane % 4) + v`` of each 16x8 fragment), through a tile of the
fragment buffer that it declares as the mma intrinsics do (``match_buffer``, so TVM compacts and
lays out the fragments as before), and with the consumer's expression, its read of the
intermediate replaced by the fragment's element. The consumer's kernel and the intermediate buffer
go. It applies where the stored buffer is an intermediate of the function with one consumer that
reads it at exactly the element it writes (a 2-d output) and reads anything else by a row, a
column or a constant; anything else is left as it was.

``MS_PRUNER_FUSE_EPILOGUE=0`` leaves the two kernels, for ablations; the analyzer reads the same
switch (``analysis/analyzer.py``).
"""

from __future__ import annotations

import os
from typing import List, Optional

import tvm
from tvm import tirx
from tvm.ir import Range
from tvm.s_tir import MatchBufferRegion, SBlock, SBlockRealize

from ..mma_k16 import C_SCOPE as ACCUMULATOR_SCOPE
from .tir_rebuild import rebuilt, with_rewritten_funcs

FUSE_EPILOGUE_ENV = "MS_PRUNER_FUSE_EPILOGUE"
FRAGMENT_ROWS, FRAGMENT_COLS = 16, 8
WARP_SIZE = 32


def epilogue_fused() -> bool:
    """Whether the builder fuses the mma epilogue (``MS_PRUNER_FUSE_EPILOGUE``, on unless "0")."""
    return os.environ.get(FUSE_EPILOGUE_ENV, "1") != "0"


def fuse_fragment_epilogues(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each PrimFunc's mma epilogue kernel fused into its GEMM (``fused_func``);
    ``mod`` itself where none is, or the switch is off."""
    return with_rewritten_funcs(mod, fused_func) if epilogue_fused() else mod


def fused_func(func) -> Optional[tirx.PrimFunc]:
    """``func`` with its first fusable fragment store writing its consumer's output, or None. The
    tree is rebuilt along the store's path by hand: a Schedule's state would cost the analyzer,
    which reads every candidate so, twice the rest of this."""
    if type(func.body).__name__ != "SBlockRealize":
        return None
    blocks = _blocks(func.body, [])
    root = blocks[0]
    for store in blocks:
        consumer = _fusable_consumer(store, root, blocks)
        fused = _fused_store(store, consumer) if consumer is not None else None
        if fused is None:
            continue
        kept = [kernel for kernel in root.body.seq if not any(b.same_as(consumer) for b in _blocks(kernel, []))]
        rewritten = [_with_block(kernel, store, fused) for kernel in kept]
        if sum(kernel is not None for kernel in rewritten) != 1:
            continue  # the store sits under a statement _with_block does not rebuild
        kernels = [new if new is not None else old for new, old in zip(rewritten, kept)]
        intermediate = store.writes[0].source
        new_root = SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                          kernels[0] if len(kernels) == 1 else tirx.SeqStmt(kernels), root.init,
                          [b for b in root.alloc_buffers if not b.same_as(intermediate)], root.match_buffers,
                          root.annotations)
        return func.with_body(SBlockRealize(func.body.iter_values, func.body.predicate, new_root))
    return None


def _with_block(stmt, old: SBlock, new: SBlock):
    """``stmt`` with the block ``old`` replaced by ``new``, rebuilt along its path; None where
    ``old`` is not under ``stmt``."""
    kind = type(stmt).__name__
    if kind == "SBlockRealize":
        block = stmt.block
        if block.same_as(old):
            return SBlockRealize(stmt.iter_values, stmt.predicate, new)
        body = _with_block(block.body, old, new)
        if body is None:
            return None
        block = SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       block.alloc_buffers, block.match_buffers, block.annotations)
        return SBlockRealize(stmt.iter_values, stmt.predicate, block)
    if kind == "SeqStmt":
        parts = [_with_block(part, old, new) for part in stmt.seq]
        if all(part is None for part in parts):
            return None
        return tirx.SeqStmt([part if part is not None else original for part, original in zip(parts, stmt.seq)])
    if kind == "For":
        body = _with_block(stmt.body, old, new)
        return None if body is None else tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                                                  stmt.thread_binding, stmt.annotations, stmt.step)
    return None


def _blocks(stmt, found: List[SBlock]) -> List[SBlock]:
    """Every block under ``stmt``, outermost first."""
    kind = type(stmt).__name__
    if kind == "SBlockRealize":
        found.append(stmt.block)
        _blocks(stmt.block.body, found)
    elif kind == "SeqStmt":
        for child in stmt.seq:
            _blocks(child, found)
    elif kind == "IfThenElse":
        for child in (stmt.then_case, stmt.else_case):
            if child is not None:
                _blocks(child, found)
    elif hasattr(stmt, "body"):
        _blocks(stmt.body, found)
    return found


def _fusable_consumer(store: SBlock, root: SBlock, blocks: List[SBlock]) -> Optional[SBlock]:
    """The consumer kernel of an ``auto_copy`` fragment store into an intermediate 2-d buffer, where
    it is the only reader and a kernel of its own at the root (what ``EpilogueAfterFragmentStore``
    leaves), else None."""
    if "auto_copy" not in store.annotations or len(store.reads) != 1 or len(store.writes) != 1:
        return None
    fragment, out = store.reads[0], store.writes[0]
    if fragment.source.scope() != ACCUMULATOR_SCOPE or out.source.scope() != "global" or len(out.region) != 2:
        return None
    if not any(out.source.same_as(b) for b in root.alloc_buffers):
        return None
    readers = [b for b in blocks if any(r.source.same_as(out.source) for r in b.reads)]
    if len(readers) != 1 or type(root.body).__name__ != "SeqStmt":
        return None
    consumer = readers[0]
    kernel = next((s for s in root.body.seq if any(b.same_as(consumer) for b in _blocks(s, []))), None)
    if kernel is None or len(_blocks(kernel, [])) != 1:
        return None
    return consumer


def _fused_store(store: SBlock, consumer: SBlock) -> Optional[SBlock]:
    """``store`` writing ``consumer``'s output lane by lane from the fragments, or None where the
    consumer is not elementwise over the stored tile."""
    fragment, out = store.reads[0], store.writes[0]
    body, ivars = consumer.body, [iv.var for iv in consumer.iter_vars]
    if (type(body).__name__ != "BufferStore" or consumer.init is not None or len(ivars) != 2
            or len(body.indices) != 2 or not all(i.same_as(v) for i, v in zip(body.indices, ivars))):
        return None
    rows, cols = (int(r.extent) for r in out.region)
    if rows % FRAGMENT_ROWS or cols % FRAGMENT_COLS or [int(r.extent) for r in fragment.region] != [rows, cols]:
        return None
    lane, *steps = (tirx.Var(name, "int32") for name in ("lane", "tile_row", "half", "tile_col", "pair"))
    row = steps[0] * FRAGMENT_ROWS + steps[1] * 8 + lane // 4
    col = steps[2] * FRAGMENT_COLS + lane % 4 * 2 + steps[3]
    tile = tirx.decl_buffer((rows, cols), fragment.source.dtype, name=f"{fragment.source.name}_tile",
                            scope=ACCUMULATOR_SCOPE, offset_factor=1)
    at = {ivars[0]: out.region[0].min + row, ivars[1]: out.region[1].min + col}

    def load(node, indices):
        if not node.source.same_as(out.source):
            return tirx.BufferLoad(node.source, indices)
        if not all(i.same_as(v) for i, v in zip(node.indices, ivars)):
            raise TypeError("the intermediate read at another element")
        return tirx.BufferLoad(tile, [row, col])

    reads = _other_reads(consumer, out)
    try:
        value = rebuilt(body.value, lambda var: at.get(var, var), on_load=load)
    except TypeError:
        return None
    if reads is None:
        return None
    nest = tirx.BufferStore(body.buffer, value, [at[ivars[0]], at[ivars[1]]])
    extents = (rows // FRAGMENT_ROWS, 2, cols // FRAGMENT_COLS, 2)
    kinds = (tirx.ForKind.SERIAL,) * 3 + (tirx.ForKind.VECTORIZED,)
    for var, extent, kind in reversed(list(zip(steps, extents, kinds))):
        nest = tirx.For(var, 0, extent, kind, nest)
    nest = tirx.For(lane, 0, WARP_SIZE, tirx.ForKind.THREAD_BINDING, nest,
                    thread_binding=tirx.IterVar(Range(0, WARP_SIZE), lane, 1, "threadIdx.x"))
    annotations = {k: v for k, v in store.annotations.items() if k != "auto_copy"}
    return SBlock(store.iter_vars, [fragment, *reads], [tirx.BufferRegion(body.buffer, list(out.region))],
                  store.name_hint, nest, None, store.alloc_buffers,
                  [*store.match_buffers, MatchBufferRegion(tile, fragment)], annotations)


def _other_reads(consumer: SBlock, out) -> Optional[list]:
    """The consumer's reads other than the intermediate, over the stored tile: an index that is the
    consumer's row or column spans the tile's rows or columns, a constant stays; None for any other."""
    ivars = [iv.var for iv in consumer.iter_vars]
    regions = []
    for read in consumer.reads:
        if read.source.same_as(out.source):
            continue
        ranges = []
        for dim in read.region:
            axis = next((k for k, v in enumerate(ivars) if dim.min.same_as(v)), None)
            if axis is not None and int(dim.extent) == 1:
                ranges.append(out.region[axis])
            elif isinstance(dim.min, tirx.IntImm):
                ranges.append(dim)
            else:
                return None
        regions.append(tirx.BufferRegion(read.source, ranges))
    return regions
