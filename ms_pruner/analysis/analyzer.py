"""StaticAnalyzer: estimated latency of a MetaSchedule candidate, with validity and breakdown."""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Union

import tvm_ffi

from ..builder import epilogue_fused, fused_func, lower_candidate
from ..hardware import CPUSpec, GPUSpec, detect_cpu, get_gpu_spec, spec_for_target
from .cpu_model import CPUEstimate, estimate_cpu
from .features import KernelFeatures, kernel_features
from .gpu_model import KernelEstimate, as_built, estimate_kernel
from .memory import BoundedMemory
from .tir_walk import walk_primfunc

# Analyses the models of one tuning process share (``ANALYSES``): one round's draft estimates at
# least this many programs (each kept as its walk and estimate), and its verify asks for the same.
REMEMBERED_ANALYSES = 2048


@dataclasses.dataclass
class Estimate:
    """What the analyzer says about one candidate. ``latency_s`` is inf when ``valid`` is False."""

    latency_s: float
    valid: bool
    reason: str = ""
    kernels: List[KernelEstimate] = dataclasses.field(default_factory=list)
    features: List[KernelFeatures] = dataclasses.field(default_factory=list)
    cpu: Optional[CPUEstimate] = None

    @property
    def score(self) -> float:
        """Higher is better, 0 for invalid: what MetaSchedule's evolutionary selection expects."""
        return 1.0 / self.latency_s if self.valid and self.latency_s > 0 else 0.0


def _primfuncs(candidate):
    """The PrimFuncs of a Schedule, IRModule or PrimFunc."""
    mod = getattr(candidate, "mod", candidate)
    if hasattr(mod, "functions"):
        return [func for _, func in mod.functions.items() if type(func).__name__ == "PrimFunc"]
    return [mod]


def _fused_as_built(func):
    """``func`` as the builder lowers it: its mma epilogue kernel fused into the GEMM where it fuses
    (builder/fused_epilogue.py), so the analysis reads the kernels that will run."""
    return (epilogue_fused() and fused_func(func)) or func


class StaticAnalyzer:
    """Parameterized static analysis of scheduled TensorIR (the "draft" model).

    ``hardware`` is a GPUSpec, a CPUSpec, or a GPU name ("h100"); ``"cpu"`` describes this machine.
    ``max_shared_memory`` is the per-block limit to enforce (defaults to the GPU's opt-in limit).
    ``check_lowering`` additionally lowers each candidate (~70 ms) and marks failures invalid.
    ``memory`` (a memory.BoundedMemory, such as the process's ``ANALYSES``) keeps each program's
    analysis by structural hash, for analyzers of the same hardware and limits that read the same
    programs: the search's draft, its verifying PaCM and its batch rules read one round's programs
    each in turn, and a hash costs a fraction of an analysis.
    """

    def __init__(self, hardware: Union[GPUSpec, CPUSpec, str] = "h100", max_shared_memory: Optional[int] = None,
                 check_lowering: bool = False, target=None, memory: Optional[BoundedMemory] = None):
        if isinstance(hardware, str):
            hardware = detect_cpu() if hardware == "cpu" else get_gpu_spec(hardware)
        self.hardware = hardware
        self.max_shared_memory = max_shared_memory
        self.check_lowering = check_lowering
        self.target = target
        self.memory = memory
        # What an analysis depends on besides the program: analyzers that agree on it share analyses.
        self.settings_key = repr((hardware, max_shared_memory, check_lowering, epilogue_fused(),
                                  str(target) if check_lowering else None))

    @classmethod
    def for_target(cls, target, gpu: Optional[GPUSpec] = None, cpu: Optional[CPUSpec] = None,
                   **kwargs) -> "StaticAnalyzer":
        """The analyzer for a MetaSchedule target: its GPU (``spec_for_target`` unless given) or a
        CPU (this one unless given)."""
        if target.kind.name == "cuda":
            gpu = gpu or spec_for_target(target)
            limit = int(target.attrs.get("max_shared_memory_per_block", gpu.smem_per_block_bytes))
            return cls(gpu, max_shared_memory=limit, target=target, **kwargs)
        return cls(cpu or detect_cpu(), target=target, **kwargs)

    @property
    def is_gpu(self) -> bool:
        return isinstance(self.hardware, GPUSpec)

    def estimate(self, candidate, key: Optional[int] = None) -> Estimate:
        """Estimate a post-processed Schedule (or its IRModule / PrimFunc)."""
        return self.analyze(candidate, key)[1]

    def analyze(self, candidate, key: Optional[int] = None):
        """(walked programs, Estimate): the walk is returned for callers that reuse it (PaCM).

        With a ``memory``, the analysis is kept under the candidate's structural hash: ``key`` where
        the caller has it (of the candidate as given), else computed here. Callers share what is
        returned, so they read it and never change it.
        """
        if self.memory is None:
            return self._analyzed(candidate)
        if key is None:
            key = int(tvm_ffi.structural_hash(getattr(candidate, "mod", candidate)))
        return self.memory.get((self.settings_key, key), lambda: self._analyzed(candidate))

    def _analyzed(self, candidate):
        try:
            funcs = _primfuncs(candidate)
            if self.is_gpu:
                funcs = [_fused_as_built(func) for func in funcs]
            programs = [walk_primfunc(func, strides=not self.is_gpu) for func in funcs]
        except Exception as err:  # pylint: disable=broad-except
            return [], Estimate(latency_s=math.inf, valid=False, reason=f"analysis failed: {err}".splitlines()[0])
        if self.check_lowering and self.target is not None:
            reason = self._lowering_error(candidate)
            if reason:
                return programs, Estimate(latency_s=math.inf, valid=False, reason=reason)
        return programs, self.estimate_programs(programs)

    def estimate_programs(self, programs) -> Estimate:
        if not self.is_gpu:
            total = 0.0
            cpu = None
            for program in programs:
                cpu = estimate_cpu(program, self.hardware)
                total += cpu.latency_s
            return Estimate(latency_s=total, valid=True, cpu=cpu)
        features = [as_built(k, self.hardware) for program in programs
                    for k in kernel_features(program, self.hardware.warp_size)]
        if not features:
            return Estimate(latency_s=math.inf, valid=False, reason="no GPU kernel in the program")
        kernels = [estimate_kernel(k, self.hardware, self.max_shared_memory) for k in features]
        invalid = next((k for k in kernels if not k.valid), None)
        if invalid is not None:
            return Estimate(latency_s=math.inf, valid=False, reason=invalid.reason, kernels=kernels, features=features)
        return Estimate(latency_s=sum(k.latency_s for k in kernels), valid=True, kernels=kernels, features=features)

    def estimate_many(self, candidates) -> List[Estimate]:
        return [self.estimate(c) for c in candidates]

    def _lowering_error(self, candidate) -> str:
        try:
            lower_candidate(getattr(candidate, "mod", candidate), self.target)
        except Exception as err:  # pylint: disable=broad-except
            lines = [line for line in str(err).splitlines() if line.strip()]
            return "failed to lower: " + (lines[-1] if lines else type(err).__name__)
        return ""


ANALYSES = BoundedMemory(REMEMBERED_ANALYSES)
