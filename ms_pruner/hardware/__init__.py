"""Hardware descriptions: GPU datasheets, the host CPU, and target resolution."""

from .cpus import CPUSpec, detect_cpu
from .gpus import GPUS, GPUSpec, get_gpu_spec, spec_for_target, spec_from_device_name
from .target import TargetChoice, add_target_options, cuda_device_name, detect_gpu, llvm_target, resolve_target

__all__ = [
    "CPUSpec",
    "GPUS",
    "GPUSpec",
    "TargetChoice",
    "add_target_options",
    "cuda_device_name",
    "detect_cpu",
    "detect_gpu",
    "get_gpu_spec",
    "llvm_target",
    "resolve_target",
    "spec_for_target",
    "spec_from_device_name",
]
