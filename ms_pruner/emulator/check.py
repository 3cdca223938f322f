"""Is a scheduled candidate's kernel right? Its lowered TIR run by the emulator, held against the
exact result, on a machine without a GPU.

A GPU check (``ms-pruner check``) times nothing wrong only after the kernel was tuned and measured;
this one runs before: every sampled or proposed candidate of a space, as the builder lowers it (our
TIR passes included: chunked and element-wise permuted copies, the m16n8k16 intrinsics, the mma
epilogue kernel, folded wait counts). What it cannot see is what happens after lowering: CUDA code
generation, the builder's fixes to the CUDA source, nvcc, and races between warps.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import List, Optional

import numpy as np

from ..builder.worker import lowered_tir
from ..workloads import relative_error
from .launches import EmulationConfig, emulate
from .memory import EmulationFault, EmulationUnsupported

STATUSES = ("right", "wrong", "fault", "unsupported")


@dataclasses.dataclass
class EmulatedCheck:
    """One candidate's kernel, emulated: ``status`` is one of STATUSES, ``reason`` says why not right."""

    status: str
    error: Optional[float] = None  # relative_error over the elements the emulated blocks wrote
    tolerance: float = 0.0
    written: float = 0.0  # share of the output those blocks wrote
    blocks: List[str] = dataclasses.field(default_factory=list)  # "kernel: run of grid blocks" per launch
    seconds: float = 0.0
    reason: Optional[str] = None

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


class EmulatedChecker:
    """Checks candidates of one workload on one target, on the same random inputs each time; ``check``
    may run on several threads at once (the workload's TE definition, which is not thread-safe, is
    read here once)."""

    def __init__(self, workload, target, config: EmulationConfig = EmulationConfig(), seed: int = 1):
        self.workload, self.target, self.config = workload, target, config
        self.inputs = workload.random_inputs(seed=seed)
        self.output_shape = workload.output_shape()
        self._exact, self._exact_lock = None, threading.Lock()

    @property
    def exact(self) -> np.ndarray:
        with self._exact_lock:
            if self._exact is None:
                self._exact = self.workload.reference(self.inputs)
        return self._exact

    def check(self, mod) -> EmulatedCheck:
        """``mod`` (a scheduled IRModule) lowered as the builder lowers it and emulated."""
        started = time.perf_counter()
        out = np.zeros(self.output_shape, dtype=self.workload.out_dtype)
        try:
            run = emulate(lowered_tir(mod, self.target), [*(x.copy() for x in self.inputs), out], self.config)
        except (EmulationFault, EmulationUnsupported) as err:
            status = "fault" if isinstance(err, EmulationFault) else "unsupported"
            return EmulatedCheck(status, tolerance=self.workload.tolerance, reason=str(err),
                                 seconds=round(time.perf_counter() - started, 2))
        check = self._judged(out, run.written[-1], all(l.blocks_run == np.prod(l.grid) for l in run.launches))
        check.blocks = [f"{l.kernel}: {l.blocks_run} of {int(np.prod(l.grid))}" for l in run.launches]
        check.seconds = round(time.perf_counter() - started, 2)
        return check

    def _judged(self, out: np.ndarray, written: np.ndarray, whole_grid: bool) -> EmulatedCheck:
        tolerance, share = self.workload.tolerance, float(written.mean())
        if not written.any():
            return EmulatedCheck("wrong", tolerance=tolerance, reason="the emulated blocks wrote no output")
        values = out[written]
        error = relative_error(values, self.exact[written])
        check = EmulatedCheck("right", error=error, tolerance=tolerance, written=round(share, 4))
        if not np.all(np.isfinite(values)):
            check.status, check.reason = "wrong", "it wrote NaN: it read memory nothing had written yet"
        elif error > tolerance:
            check.status, check.reason = "wrong", f"error {error:.2e} over the tolerance {tolerance:.0e}"
        elif whole_grid and not written.all():
            check.status, check.reason = "wrong", f"every block ran and {int((~written).sum())} outputs were never written"
        return check
