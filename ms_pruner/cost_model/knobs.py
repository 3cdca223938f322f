"""A candidate's sampled decisions as a fixed-width vector: what the analyzer's estimate leaves out.

Records of one tile geometry (same block tile, warps and fragments a warp) get the same analyzer
estimate and the same pattern tokens, yet measure several per cent apart on the H100: the split of
the grid between blockIdx.y and blockIdx.x (which blocks run together, so what they share in L2),
and the order of a warp's fragment loops (S3 x S4, which ptxas schedules differently) differ
between them (docs/analyzer.md, section 3). Those are trace decisions, known before
a candidate is built, so the verify model sees them directly.

Layout (``KNOB_DIM`` floats, slog-scaled, zero where a trace has fewer decisions):

- up to ``SPATIAL_SPLITS`` multi-level spatial splits (``SamplePerfectTile`` with 4+ levels), each
  its first five factors and three products: levels 0-1 (the grid share), 2.. (the block share),
  3.. (the warp share);
- up to ``REDUCTION_SPLITS`` reduction splits (2-3 levels), each its three factors;
- up to ``CATEGORICALS`` ``SampleCategorical`` values (vector lanes, unroll steps), as the value
  chosen, not its index;
- the count of each of these kinds, so a sketch with other instructions is told apart.
"""

from __future__ import annotations

import math
from typing import List

import numpy as np

from .tokens import slog

SPATIAL_SPLITS = 3
SPATIAL_SLOTS = 8
REDUCTION_SPLITS = 2
REDUCTION_SLOTS = 3
CATEGORICALS = 6
KNOB_DIM = SPATIAL_SPLITS * SPATIAL_SLOTS + REDUCTION_SPLITS * REDUCTION_SLOTS + CATEGORICALS + 3


def _decisions(trace) -> List[tuple]:
    """(kind, decision) of every sampling instruction, the categorical ones as the value chosen."""
    out = []
    for inst in trace.insts:
        if inst not in trace.decisions:
            continue
        kind, decision = inst.kind.name, trace.decisions[inst]
        if kind == "SampleCategorical":
            candidates = inst.attrs[0]
            out.append((kind, [float(candidates[int(decision)])]))
        elif kind in ("SamplePerfectTile", "SamplePartitionedTile"):
            out.append((kind, [int(x) for x in decision]))
    return out


def _spatial(factors: List[int]) -> List[float]:
    head = (list(factors) + [1] * 5)[:5]
    return head + [math.prod(factors[:2]), math.prod(factors[2:]), math.prod(factors[3:])]


def schedule_knobs(trace) -> np.ndarray:
    """The ``KNOB_DIM`` vector of a trace with decisions (a sampled or measured candidate's)."""
    spatial, reduction, categorical = [], [], []
    for kind, values in _decisions(trace):
        if kind == "SampleCategorical":
            categorical.append(values[0])
        elif len(values) >= 4:
            spatial.append(_spatial(values))
        else:
            reduction.append((list(values) + [1] * REDUCTION_SLOTS)[:REDUCTION_SLOTS])
    vector: List[float] = []
    for rows, width, keep in ((spatial, SPATIAL_SLOTS, SPATIAL_SPLITS), (reduction, REDUCTION_SLOTS, REDUCTION_SPLITS)):
        for i in range(keep):
            vector.extend(rows[i] if i < len(rows) else [0.0] * width)
    vector.extend((categorical + [0.0] * CATEGORICALS)[:CATEGORICALS])
    vector.extend([len(spatial), len(reduction), len(categorical)])
    return np.array([slog(v) for v in vector], dtype=np.float32)
