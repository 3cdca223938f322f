"""Lowered CUDA kernels run on the CPU, every thread of the chosen blocks at once: do a candidate's
tensor-core kernels compute what its workload asks, before any GPU time is spent on it?

``EmulatedChecker(workload, target).check(mod)`` lowers a scheduled candidate as the builder does
and holds the emulated output against the exact result; ``emulate`` runs a lowered module on arrays;
``PrimFuncWorkload`` makes a model's task (a PrimFunc) such a workload.
What it models and what it cannot see: docs/emulator.md.
"""

from .check import STATUSES, EmulatedCheck, EmulatedChecker
from .launches import EmulatedRun, EmulationConfig, Launch, emulate
from .memory import EmulationFault, EmulationUnsupported
from .task import PrimFuncWorkload

__all__ = [
    "STATUSES",
    "EmulatedCheck",
    "EmulatedChecker",
    "EmulatedRun",
    "EmulationConfig",
    "EmulationFault",
    "EmulationUnsupported",
    "Launch",
    "PrimFuncWorkload",
    "emulate",
]
