"""Candidate -> token sequence for PaCM: one token per data-flow pattern, plus the analyzer's view.

Each block of the scheduled program becomes one token whose first slots say which pattern it is
(global->shared copy, shared->fragment load, tensor-core MMA, fragment init, fragment->shared
store, shared->global store, CUDA-core compute, other) and whose other slots describe it: loop
extents and thread bindings, bytes moved, vector width, coalescing, bank conflicts, unroll,
pipelining. A final summary token carries the static analyzer's estimate and its terms, so the
learned model starts from the analyzer's physics and only has to learn corrections. Numbers go
through slog(x) = sign(x) log2(1 + |x|), so no per-dataset normalisation has to be stored.
"""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from ..analysis.analyzer import Estimate, StaticAnalyzer
from ..analysis.features import is_fragment, is_shared
from ..analysis.tir_walk import FRAGMENT_LOADS, FRAGMENT_STORES, MMA_INTRINSICS, BlockInfo, ProgramInfo

PATTERNS = (
    "copy_global_to_shared",
    "load_fragment",
    "mma",
    "init_fragment",
    "store_fragment",
    "copy_shared_to_global",
    "compute",
    "other",
    "summary",
)
BLOCK_SLOTS = 20
SUMMARY_SLOTS = 16
TOKEN_DIM = len(PATTERNS) + BLOCK_SLOTS + SUMMARY_SLOTS
MAX_TOKENS = 16


def slog(value: float) -> float:
    if value is None or not math.isfinite(value):
        return 0.0
    return math.copysign(math.log2(1.0 + abs(value)), value)


def block_pattern(block: BlockInfo) -> str:
    names = block.intrinsics
    if any(n in MMA_INTRINSICS for n in names):
        return "mma"
    if any(n in FRAGMENT_LOADS for n in names):
        return "load_fragment"
    if any(n in FRAGMENT_STORES for n in names):
        return "store_fragment"
    if block.auto_copy_lanes and any(is_fragment(r.scope) for r in block.reads):
        return "store_fragment"  # the mma rule's write-back: accumulators to global through TVM's auto copy
    if block.is_init and any(is_fragment(w.scope) for w in block.writes):
        return "init_fragment"
    dst = block.writes[0].scope if block.writes else ""
    srcs = [r.scope for r in block.reads]
    if block.float_ops == 0 and is_shared(dst) and "global" in srcs:
        return "copy_global_to_shared"
    if block.float_ops == 0 and dst == "global" and any(is_shared(s) for s in srcs):
        return "copy_shared_to_global"
    if block.float_ops > 0:
        return "compute"
    return "other"


def _block_token(block: BlockInfo) -> np.ndarray:
    token = np.zeros(TOKEN_DIM, dtype=np.float32)
    token[PATTERNS.index(block_pattern(block))] = 1.0
    extents = block.thread_extents()
    read_bytes = sum(a.elements * a.dtype_bytes for a in block.reads)
    write_bytes = sum(a.elements * a.dtype_bytes for a in block.writes)
    serial = [loop.extent for loop in block.loops if loop.thread is None]
    own_serial = 1
    for loop in block.loops[block.own_start:]:
        if loop.thread is None and loop.kind != "vectorized":
            own_serial *= loop.extent
    access = block.access
    values = [
        block.executions,
        block.own_extent,
        read_bytes,
        write_bytes,
        block.executions * (read_bytes + write_bytes),
        block.auto_copy_lanes or block.vector_lanes,
        own_serial,
        math.prod(serial) if serial else 1,
        len(block.loops),
        extents.get("threadIdx.x", 1) * extents.get("threadIdx.y", 1) * extents.get("threadIdx.z", 1),
        extents.get("blockIdx.x", 1) * extents.get("blockIdx.y", 1) * extents.get("blockIdx.z", 1),
        max((loop.unroll_max_step for loop in block.loops), default=0),
        block.float_ops,
        block.pad_ratio,
        block.active_ratio,
    ]
    base = len(PATTERNS)
    for i, value in enumerate(values):
        token[base + i] = slog(value)
    token[base + 15] = float(any(loop.pipelined for loop in block.loops))
    if access is not None:
        token[base + 16] = access.useful_bytes / (access.global_sectors * 32.0)
        token[base + 17] = slog(access.global_lines)
        token[base + 18] = slog(access.shared_wavefronts)
    token[base + 19] = float(block.warp_level)
    return token


def _summary_token(estimate: Estimate) -> np.ndarray:
    token = np.zeros(TOKEN_DIM, dtype=np.float32)
    token[PATTERNS.index("summary")] = 1.0
    base = len(PATTERNS) + BLOCK_SLOTS
    token[base] = -math.log(estimate.latency_s) if estimate.valid and estimate.latency_s > 0 else 0.0
    token[base + 1] = float(estimate.valid)
    if estimate.kernels:
        k, f = estimate.kernels[0], estimate.features[0]
        values = [k.tensor_cycles, k.smem_cycles, k.l2_cycles, k.issue_cycles, k.latency_cycles, k.trip_cycles,
                  k.blocks_per_sm, k.waves, k.wave_efficiency, k.regs_per_thread, k.smem_per_block,
                  k.spill_factor, f.warps_per_block, f.grid]
        for i, value in enumerate(values):
            token[base + 2 + i] = slog(value)
    elif estimate.cpu is not None:
        c = estimate.cpu
        for i, value in enumerate([c.compute_s * 1e9, c.cache_s * 1e9, c.dram_s * 1e9, c.overhead_s * 1e9,
                                   c.parallel_extent, c.vector_lanes]):
            token[base + 2 + i] = slog(value)
    return token


def prior_log_throughput(estimate: Estimate) -> float:
    """-log(estimated latency): the analyzer's opinion, the residual baseline of PaCM's score."""
    return -math.log(estimate.latency_s) if estimate.valid and estimate.latency_s > 0 else -math.log(10.0)


def program_tokens(program: ProgramInfo, estimate: Estimate) -> np.ndarray:
    blocks = program.blocks[: MAX_TOKENS - 1]
    return np.stack([_block_token(b) for b in blocks] + [_summary_token(estimate)])


class TokenExtractor:
    """Tokens (and the analyzer prior) for candidates, with the analyzer run once per candidate."""

    def __init__(self, analyzer: StaticAnalyzer):
        self.analyzer = analyzer

    def extract(self, mod) -> tuple:
        """(tokens, prior) of a post-processed Schedule, IRModule or PrimFunc."""
        programs, estimate = self.analyzer.analyze(mod)
        if not programs:
            return _summary_token(estimate)[None, :], prior_log_throughput(estimate)
        return program_tokens(programs[0], estimate), prior_log_throughput(estimate)

    def extract_many(self, mods) -> List[tuple]:
        return [self.extract(mod) for mod in mods]


def pad_batch(sequences: List[np.ndarray], max_tokens: Optional[int] = None):
    """(batch, tokens, dim) array and a (batch, tokens) padding mask (True = padding)."""
    length = max_tokens or max(len(s) for s in sequences)
    batch = np.zeros((len(sequences), length, TOKEN_DIM), dtype=np.float32)
    mask = np.ones((len(sequences), length), dtype=bool)
    for i, seq in enumerate(sequences):
        n = min(len(seq), length)
        batch[i, :n] = seq[:n]
        mask[i, :n] = False
    return batch, mask
