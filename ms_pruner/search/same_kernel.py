"""Candidates that compile to a kernel already measured, told apart before they are measured.

Two schedules that differ only in their unroll depth (``meta_schedule.unroll_explicit``) are
different programs to MetaSchedule (their structural hashes differ), but once every loop the
pragma could unroll is unrolled, a larger depth changes nothing: lowering gives the same TIR and
code generation the same kernel. In the H100 Pruner conv2d run of 2026-11-26, 256 records were
222 distinct CUDA kernels: 34 measurements repeated a kernel, all of them schedules one unroll
decision away from a measured one, most of them Droplet's unroll neighbours of the best; the
matmul run of 2026-11-24 had the same count (docs/search.md, one round).

So a candidate whose other decisions equal those of a measured schedule (or of one already picked
for the batch) is lowered, and so is that schedule, and the candidate is dropped when both lower to
the same TIR (structural hash with free variables mapped, which told the 222 kernels apart exactly).
Only those candidates are lowered (183 times over that conv2d run's 256 records).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import tvm_ffi

from ..builder.worker import lowered_tir
from .droplet import annotated_draws

UNROLL_ANNOTATIONS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")


def unroll_free_decisions(trace) -> Tuple:
    """The trace's sampled decisions (postprocessors removed) with its unroll draws left out, and
    its length: schedules with equal values differ at most in unroll depth."""
    base = trace.simplified(remove_postproc=True)
    unroll_draws = [value for value, key in annotated_draws(base) if key in UNROLL_ANNOTATIONS]
    values = []
    for inst in base.insts:
        if inst not in base.decisions:
            continue
        if inst.outputs and any(draw.same_as(inst.outputs[0]) for draw in unroll_draws):
            values.append("unroll")
        else:
            values.append(str(base.decisions[inst]))
    return (len(base.insts),) + tuple(values)


def lowered_key(mod, target) -> Optional[int]:
    """Structural hash (free variables mapped) of ``mod`` lowered as the builder lowers it
    (``builder.worker.lowered_tir``); None when it does not lower."""
    try:
        return int(tvm_ffi.structural_hash(lowered_tir(mod, target), map_free_vars=True))
    except Exception:  # pylint: disable=broad-except
        return None


class SameKernels:
    """The measured schedules (and this batch's picks) by ``unroll_free_decisions``, each lowered
    only when a candidate with the same decisions comes: ``repeats(sch)``."""

    def __init__(self, target):
        self.target = target
        self._measured: Dict[Tuple, List[list]] = {}
        self._picked: Dict[Tuple, List[list]] = {}
        self.lowered = 0
        self.repeated = 0

    def note_measured(self, trace, mod) -> None:
        self._measured.setdefault(unroll_free_decisions(trace), []).append([mod, None])

    def new_batch(self) -> None:
        self._picked = {}

    def repeats(self, sch) -> bool:
        """Whether ``sch`` lowers like a measured schedule or an earlier pick of this batch with the
        same other decisions; if not, it counts as picked."""
        signature = unroll_free_decisions(sch.trace)
        entry = [sch.mod, None]
        others = self._measured.get(signature, []) + self._picked.get(signature, [])
        if others:
            key = self._key(entry)
            if key is not None and any(self._key(other) == key for other in others):
                self.repeated += 1
                return True
        self._picked.setdefault(signature, []).append(entry)
        return False

    def _key(self, entry: list) -> Optional[int]:
        if entry[1] is None and entry[0] is not None:
            entry[1] = lowered_key(entry[0], self.target)
            self.lowered += 1
            if entry[1] is None:
                entry[0] = None  # does not lower: never compared again
        return entry[1]
