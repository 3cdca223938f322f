"""Turn the user's ``--target``/``--gpu`` words into a MetaSchedule target and a hardware spec."""

from __future__ import annotations

import dataclasses
from typing import Optional

import psutil
import tvm
from tvm.target import Target

from ..errors import UserError
from .cpus import CPUSpec, detect_cpu
from .gpus import GPUSpec, get_gpu_spec, spec_from_device_name


@dataclasses.dataclass(frozen=True)
class TargetChoice:
    """A target together with the spec of the hardware it runs on (GPU or CPU)."""

    target: object  # tvm.target.Target
    gpu: Optional[GPUSpec]
    cpu: Optional[CPUSpec]

    @property
    def is_cuda(self) -> bool:
        return self.gpu is not None


def cuda_device_name() -> Optional[str]:
    """Name of CUDA device 0 as TVM sees it, or None when there is no usable GPU."""
    try:
        device = tvm.cuda(0)
        if not device.exist:
            return None
        return str(device.device_name)
    except Exception:  # pylint: disable=broad-except
        return None


def detect_gpu() -> Optional[GPUSpec]:
    """The spec of CUDA device 0, or None without a GPU (or for a GPU we have no datasheet for)."""
    name = cuda_device_name()
    return spec_from_device_name(name) if name else None


def llvm_target(cores: Optional[int] = None):
    return Target({"kind": "llvm", "num-cores": cores or psutil.cpu_count(logical=False) or 1})


def resolve_target(target: str = "auto", gpu: Optional[str] = None, require_device: bool = True) -> TargetChoice:
    """Resolve ``llvm``, ``cuda``, ``auto`` or a GPU name/TVM tag (``h100``, ``nvidia/nvidia-a100``).

    With ``require_device`` a CUDA target on a machine without a GPU is an error, raised before
    anything slow happens: candidates could be built but never measured.
    """
    word = (target or "auto").strip()
    device_name = cuda_device_name() if word in ("auto", "cuda") or require_device else None
    if word == "auto":
        word = "cuda" if device_name else "llvm"
    if word == "llvm":
        if gpu:
            raise UserError("--gpu names a GPU but --target is llvm; use --target cuda")
        return TargetChoice(target=llvm_target(), gpu=None, cpu=detect_cpu())
    if word == "cuda":
        spec = get_gpu_spec(gpu) if gpu else (spec_from_device_name(device_name) if device_name else None)
        if spec is None:
            if device_name:
                raise UserError(f"no GPUSpec for device '{device_name}'; pass --gpu NAME")
            raise UserError(_no_gpu_message("cuda"))
    else:
        spec = get_gpu_spec(gpu or word)
    if require_device and not device_name:
        raise UserError(_no_gpu_message(word))
    return TargetChoice(target=spec.target(), gpu=spec, cpu=None)


def _no_gpu_message(word: str) -> str:
    return (
        f"target '{word}' needs a CUDA GPU to measure candidates, but none was found "
        "(tvm.cuda(0).exist is False); use --target llvm here, or measure on GPU servers with "
        "--rpc HOST:PORT:KEY (tune, compare, tune-model, check, remeasure)"
    )
