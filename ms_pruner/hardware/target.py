"""Turn the user's ``--target``/``--gpu`` words into a MetaSchedule target and a hardware spec."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import psutil
import tvm
from tvm.target import Target, codegen

from ..errors import UserError, last_line
from .cpus import CPUSpec, detect_cpu
from .gpus import GPUS, GPUSpec, UnknownGPU, compute_capability, get_gpu_spec, spec_for_target, spec_from_device_name


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


def add_target_options(parser) -> None:
    """``--target`` and ``--gpu`` as ``resolve_target`` reads them, on every command that takes them."""
    parser.add_argument("--target", default="auto",
                        help="llvm | cuda | GPU name or TVM tag | TVM target as a JSON dict, e.g. "
                             '\'{"kind": "cuda", "arch": "sm_80"}\' | auto (the GPU here, else llvm)')
    parser.add_argument("--gpu", default=None,
                        help="GPU spec name (h100, a100, ...; h100:FIELD=VALUE,... changes its figures); "
                             "default: the target's, else detected")


def resolve_target(target="auto", gpu: Optional[str] = None, require_device: bool = True) -> TargetChoice:
    """Resolve ``llvm``, ``cuda``, ``auto``, a GPU name (``h100``), a TVM tag (``nvidia/nvidia-a100``)
    or a TVM target as a JSON dict (TVM 0.27's form, ``{"kind": "cuda", "arch": "sm_80"}``; a dict
    from Python too).

    A dict or a tag is completed from the GPU's sheet (``--gpu``, else its ``model`` or ``arch``),
    the attributes it gives kept: MetaSchedule needs the thread and shared-memory limits a bare
    ``{"kind": "cuda"}`` lacks. With ``require_device`` a CUDA target on a machine without a GPU is
    an error, raised before anything slow happens: candidates could be built but never measured.
    """
    if isinstance(target, dict):
        return _completed(dict(target), gpu, require_device, json.dumps(target, default=str))
    word = (target or "auto").strip()
    if word.startswith("{"):
        return _completed(_json_config(word), gpu, require_device, word)
    if any(char.isspace() for char in word):
        raise UserError(f"--target '{word}': TVM 0.27 takes a target with options as a JSON dict, "
                        'e.g. \'{"kind": "cuda", "arch": "sm_80"}\' or \'{"kind": "llvm", "mcpu": "znver3"}\'')
    device_name = cuda_device_name() if word in ("auto", "cuda") or require_device else None
    if word == "auto":
        word = "cuda" if device_name else "llvm"
    if word == "llvm":
        return _completed({"kind": "llvm"}, gpu, require_device, word)
    if word == "cuda":
        spec = get_gpu_spec(gpu) if gpu else (spec_from_device_name(device_name) if device_name else None)
        if spec is None:
            if device_name:
                raise UserError(f"no GPUSpec for device '{device_name}'; pass --gpu NAME")
            raise UserError(_no_gpu_message("cuda"))
    else:
        try:
            named = get_gpu_spec(word)
        except UnknownGPU:
            return _completed(_tag_config(word), gpu, require_device, word)
        spec = get_gpu_spec(gpu) if gpu else named
        _require_same_arch(spec, named.arch, word)
    if require_device and not device_name:
        raise UserError(_no_gpu_message(word))
    return TargetChoice(target=spec.target(), gpu=spec, cpu=None)


def _json_config(text: str) -> dict:
    try:
        config = json.loads(text)
    except ValueError as err:
        raise UserError(f"--target '{text}' is not a JSON dict: {err}") from err
    if not isinstance(config, dict):
        raise UserError(f"--target '{text}' is not a JSON dict")
    return config


def _tag_config(word: str) -> dict:
    """The attributes of TVM's tag ``word`` (one we have no GPU name for, e.g. nvidia/nvidia-t4)."""
    try:
        config = dict(Target(word).export())
    except Exception as err:  # pylint: disable=broad-except
        raise UserError(f"unknown target '{word}': give llvm, cuda, auto, a GPU ({', '.join(sorted(GPUS))}), "
                        'a TVM tag (nvidia/nvidia-t4) or a JSON dict (\'{"kind": "cuda", "arch": "sm_80"}\')') from err
    config.pop("tag", None)
    return config


def _completed(config: dict, gpu: Optional[str], require_device: bool, text: str) -> TargetChoice:
    """A TVM target config (a JSON dict, a tag's attributes) as MetaSchedule tunes it: an ``llvm``
    one with the host's cores unless it names them, a CUDA one on its GPU's sheet (``GPUSpec.target``)
    with the attributes it gives laid over it. ``text``: the target as the user wrote it."""
    kind = config.get("kind")
    if kind == "llvm":
        if gpu:
            raise UserError("--gpu names a GPU but --target is llvm; use --target cuda")
        return TargetChoice(target=_llvm_checked(config, text), gpu=None, cpu=detect_cpu())
    if kind != "cuda":
        _checked(config, text)
        raise UserError(f"--target {text}: ms-pruner tunes llvm and cuda targets, not {kind}")
    device_name = cuda_device_name()
    if gpu:
        spec = get_gpu_spec(gpu)
    elif "arch" in config:
        spec = spec_for_target(_checked(config, text))
    elif "model" in config:
        spec = get_gpu_spec(str(config["model"]))
    else:
        spec = spec_from_device_name(device_name) if device_name else None
        if spec is None:
            raise UserError(f"--target {text} names no arch, and no GPU with a sheet is here: add one or --gpu NAME")
    if gpu and "arch" in config:
        _require_same_arch(spec, str(config["arch"]), text)
    if require_device and not device_name:
        raise UserError(_no_gpu_message(text))
    base = spec.target(config.get("max_shared_memory_per_block"))
    return TargetChoice(target=_checked({**base.export(), **config, "model": spec.name}, text), gpu=spec, cpu=None)


def _llvm_checked(config: dict, text: str):
    """An ``llvm`` target with the host's cores unless it names them, and an ``mcpu`` LLVM knows (for
    another, TVM logs a line and quietly compiles for a generic CPU)."""
    completed = {"num-cores": llvm_target().attrs["num-cores"], **config}
    mcpu = completed.pop("mcpu", None)
    if mcpu is not None:
        cpus = _checked(completed, text)
        if str(mcpu) not in codegen.llvm_get_cpu_archlist(cpus):
            triple = cpus.attrs.get("mtriple") or codegen.llvm_get_system_triple()
            raise UserError(f"--target {text}: LLVM knows no CPU '{mcpu}' for {triple}; this machine's is "
                            f"'{codegen.llvm_get_system_cpu()}'")
        completed["mcpu"] = mcpu
    return _checked(completed, text)


def _require_same_arch(spec: GPUSpec, arch: str, text: str) -> None:
    """``--gpu`` gives the analyzer's sheet for the target's code, so it is of the target's architecture."""
    if compute_capability(spec.arch) != compute_capability(arch):
        raise UserError(f"--gpu {spec.name} is {spec.arch}, but --target {text} is for {arch}")


def _checked(config: dict, text: str):
    """``Target(config)``, or TVM's reason as one line."""
    try:
        return Target(config)
    except Exception as err:  # pylint: disable=broad-except
        raise UserError(f"--target {text}: {last_line(err)}") from err


def _no_gpu_message(word: str) -> str:
    return (
        f"target '{word}' needs a CUDA GPU to measure candidates, but none was found "
        "(tvm.cuda(0).exist is False); use --target llvm here, or measure on GPU servers with "
        "--rpc HOST:PORT:KEY (tune, compare, tune-model, check, remeasure)"
    )
