"""GPU descriptions from public datasheets, used by the static analyzer and to build targets.

Every number the analyzer turns into time comes from here, so a new GPU is one table entry.
Peaks are dense (no structured sparsity) at the boost clock. L2 bandwidth is not published as a
datasheet figure for every part; where it is not, it is derived as bytes-per-clock times the boost
clock, and the entry says so in ``notes``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from typing import Dict, Optional

from tvm.target import Target

from ..errors import UserError

KIB = 1024
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GPUSpec:
    """Per-device limits and throughputs of one NVIDIA GPU."""

    name: str
    marketing_name: str
    arch: str  # TVM's "sm_XX" string
    sm_count: int
    boost_clock_mhz: int
    fp16_tensor_tflops: float  # fp16 inputs, fp16 accumulate, dense
    fp16_tensor_fp32acc_tflops: float  # fp16 inputs, fp32 accumulate, dense
    fp32_tflops: float  # CUDA-core FMA peak (2 FLOP per FMA)
    dram_gbps: float
    l2_gbps: float
    l2_bytes: int
    smem_per_sm_bytes: int
    l1_smem_bytes_per_sm: int  # unified L1 + shared memory array per SM
    smem_per_block_bytes: int  # opt-in maximum for one block (dynamic shared memory)
    smem_per_block_default_bytes: int  # static limit without opt-in
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    warp_size: int
    smem_bytes_per_clock_per_sm: int
    l2_latency_cycles: int  # load-to-use latency of an L2 hit, from microbenchmark literature
    tvm_tag: Optional[str]
    notes: str = ""
    # mma.sync m16n8k8's tensor throughput over m16n8k16's, both back to back in registers
    # (scripts/mma_ceiling.py); 1.0 where unmeasured. WMMA's 16x16x16 compiles to m16n8k16.
    mma_k8_relative_rate: float = 1.0
    # The share of the datasheet tensor peak that mma.sync m16n8k16 reaches back to back in
    # registers (scripts/mma_ceiling.py): Hopper's peak is wgmma's, which no MetaSchedule rule
    # emits; 1.0 where mma.sync is the peak's instruction (Ampere, Ada) or unmeasured.
    warp_mma_share: float = 1.0

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def clock_hz(self) -> float:
        return self.boost_clock_mhz * 1e6

    def tensor_flops_per_cycle_per_sm(self, accumulate_dtype: str) -> float:
        return self.tensor_tflops(accumulate_dtype) * 1e12 / (self.sm_count * self.clock_hz)

    @property
    def smem_gbps(self) -> float:
        """Aggregate shared-memory bandwidth of all SMs, GB/s."""
        return self.smem_bytes_per_clock_per_sm * self.sm_count * self.boost_clock_mhz * 1e6 / 1e9

    def mma_peak_share(self, mma_k: int) -> float:
        """The share of the tensor peak a warp's MMA of depth ``mma_k`` can reach (m16n8k8: 8)."""
        return self.warp_mma_share * (self.mma_k8_relative_rate if mma_k == 8 else 1.0)

    def tensor_tflops(self, accumulate_dtype: str) -> float:
        if accumulate_dtype == "float16":
            return self.fp16_tensor_tflops
        return self.fp16_tensor_fp32acc_tflops

    def target(self, max_shared_memory_per_block: Optional[int] = None):
        """The MetaSchedule target for this GPU.

        By default this is what TVM's tag gives (48 KiB shared memory per block, as stock
        MetaSchedule tunes), so records from us and from stock MetaSchedule are comparable, plus
        TVM's ``model`` attribute naming this spec: parts of one architecture (H100 SXM, H100 PCIe
        and H200 are all ``sm_90a``) get the same code but not the same analyzer figures, and
        ``spec_for_target`` reads the part back from the target a strategy is given.
        ``max_shared_memory_per_block`` raises the cap towards ``smem_per_block_bytes``.
        """
        config = {
            "kind": "cuda",
            "arch": self.arch,
            "keys": ["cuda", "gpu"],
            "max_num_threads": self.max_threads_per_block,
            "max_threads_per_block": self.max_threads_per_block,
            "thread_warp_size": self.warp_size,
            "registers_per_block": self.regs_per_block,
            "max_shared_memory_per_block": self.smem_per_block_default_bytes,
            "l2_cache_size_bytes": self.l2_bytes,
        }
        if self.tvm_tag is not None:
            config = dict(Target(self.tvm_tag).export())
        if max_shared_memory_per_block is not None:
            if max_shared_memory_per_block > self.smem_per_block_bytes:
                raise UserError(
                    f"max_shared_memory_per_block {max_shared_memory_per_block} exceeds the "
                    f"{self.name} opt-in limit of {self.smem_per_block_bytes} bytes"
                )
            config["max_shared_memory_per_block"] = max_shared_memory_per_block
        config["model"] = self.name
        return Target(config)

    # Named constructors for the common parts, so call sites read ``GPUSpec.h100()``.
    @classmethod
    def h100(cls) -> "GPUSpec":
        return GPUS["h100"]

    @classmethod
    def a100(cls) -> "GPUSpec":
        return GPUS["a100"]


def _ampere_hopper_common(**kw) -> dict:
    base = dict(
        regs_per_sm=65536,
        regs_per_block=65536,
        max_regs_per_thread=255,
        max_threads_per_sm=2048,
        max_threads_per_block=1024,
        max_blocks_per_sm=32,
        warp_size=32,
        smem_bytes_per_clock_per_sm=128,
        smem_per_block_default_bytes=48 * KIB,
        l2_latency_cycles=230,
    )
    base.update(kw)
    return base


def _geforce_common(**kw) -> dict:
    base = _ampere_hopper_common(max_threads_per_sm=1536, max_blocks_per_sm=16)
    base.update(kw)
    return base


GPUS: Dict[str, GPUSpec] = {
    spec.name: spec
    for spec in [
        GPUSpec(
            name="a100",
            marketing_name="NVIDIA A100-SXM4-40GB",
            arch="sm_80",
            sm_count=108,
            boost_clock_mhz=1410,
            fp16_tensor_tflops=312.0,
            fp16_tensor_fp32acc_tflops=312.0,
            fp32_tflops=19.5,
            dram_gbps=1555.0,
            l2_gbps=5120 * 1.41,
            l2_bytes=40 * MIB,
            smem_per_sm_bytes=164 * KIB,
            l1_smem_bytes_per_sm=192 * KIB,
            smem_per_block_bytes=163 * KIB,
            tvm_tag="nvidia/nvidia-a100",
            notes="L2 = 5120 B/clk (A100 whitepaper) x boost clock",
            **_ampere_hopper_common(),
        ),
        GPUSpec(
            name="h100",
            marketing_name="NVIDIA H100 80GB HBM3 (SXM5)",
            arch="sm_90a",
            sm_count=132,
            boost_clock_mhz=1980,
            fp16_tensor_tflops=989.4,
            fp16_tensor_fp32acc_tflops=989.4,
            fp32_tflops=66.9,
            dram_gbps=3350.0,
            l2_gbps=5120 * 1.98,
            l2_bytes=50 * MIB,
            smem_per_sm_bytes=228 * KIB,
            l1_smem_bytes_per_sm=256 * KIB,
            smem_per_block_bytes=227 * KIB,
            tvm_tag="nvidia/nvidia-h100",
            notes="L2 bandwidth not published; 5120 B/clk assumed as on A100, x boost clock; "
                  "m16n8k8 at 476.9 and m16n8k16 at 639.7 TFLOP/s on an H200 (same SM and clock; "
                  "h200/mma_ceiling.json)",
            mma_k8_relative_rate=476.87 / 639.73,
            warp_mma_share=639.73 / 989.4,
            **_ampere_hopper_common(l2_latency_cycles=260),
        ),
        GPUSpec(
            name="rtx3090",
            marketing_name="NVIDIA GeForce RTX 3090",
            arch="sm_86",
            sm_count=82,
            boost_clock_mhz=1695,
            fp16_tensor_tflops=142.0,
            fp16_tensor_fp32acc_tflops=71.0,
            fp32_tflops=35.6,
            dram_gbps=936.0,
            l2_gbps=2048 * 1.695,
            l2_bytes=6 * MIB,
            smem_per_sm_bytes=128 * KIB,
            l1_smem_bytes_per_sm=128 * KIB,
            smem_per_block_bytes=99 * KIB,
            tvm_tag="nvidia/geforce-rtx-3090",
            notes="GA102: fp32-accumulate tensor rate is half the fp16 rate; L2 2048 B/clk assumed",
            **_geforce_common(),
        ),
        GPUSpec(
            name="rtx4090",
            marketing_name="NVIDIA GeForce RTX 4090",
            arch="sm_89",
            sm_count=128,
            boost_clock_mhz=2520,
            fp16_tensor_tflops=330.3,
            fp16_tensor_fp32acc_tflops=165.2,
            fp32_tflops=82.6,
            dram_gbps=1008.0,
            l2_gbps=5120 * 2.52,
            l2_bytes=72 * MIB,
            smem_per_sm_bytes=128 * KIB,
            l1_smem_bytes_per_sm=128 * KIB,
            smem_per_block_bytes=99 * KIB,
            tvm_tag="nvidia/geforce-rtx-4090",
            notes="AD102: fp32-accumulate tensor rate is half; L2 5120 B/clk assumed",
            **_geforce_common(max_blocks_per_sm=24),
        ),
        GPUSpec(
            name="l4",
            marketing_name="NVIDIA L4",
            arch="sm_89",
            sm_count=58,
            boost_clock_mhz=2040,
            fp16_tensor_tflops=121.0,
            fp16_tensor_fp32acc_tflops=121.0,
            fp32_tflops=30.3,
            dram_gbps=300.0,
            l2_gbps=5120 * 2.04,
            l2_bytes=48 * MIB,
            smem_per_sm_bytes=100 * KIB,
            l1_smem_bytes_per_sm=128 * KIB,
            smem_per_block_bytes=99 * KIB,
            tvm_tag=None,
            notes="AD104; no TVM tag, the target is built from this entry; L2 5120 B/clk assumed",
            **_geforce_common(max_blocks_per_sm=24),
        ),
    ]
}

def _variant(base: str, **changes) -> GPUSpec:
    """A part that differs from ``base`` only in what ``changes`` names (memory, clocks, SMs)."""
    return dataclasses.replace(GPUS[base], **changes)


GPUS.update({
    spec.name: spec
    for spec in [
        _variant("a100", name="a100-80gb", marketing_name="NVIDIA A100-SXM4-80GB", dram_gbps=2039.0),
        _variant("h100", name="h100-pcie", marketing_name="NVIDIA H100 PCIe 80GB", sm_count=114,
                 boost_clock_mhz=1755, fp16_tensor_tflops=756.0, fp16_tensor_fp32acc_tflops=756.0,
                 fp32_tflops=51.2, dram_gbps=2000.0, l2_gbps=5120 * 1.755,
                 notes="L2 bandwidth not published; 5120 B/clk assumed, x boost clock"),
        _variant("h100", name="h200", marketing_name="NVIDIA H200 141GB HBM3e (SXM)", dram_gbps=4800.0,
                 notes="same GH100 die as H100 SXM; L2 bandwidth assumed as for H100; m16n8k8 at 476.9 of "
                       "m16n8k16's 639.7 TFLOP/s here (h200/mma_ceiling.json)"),
    ]
})

_ALIASES = {
    "a100-40gb": "a100",
    "a100-sxm4-40gb": "a100",
    "a100-sxm4-80gb": "a100-80gb",
    "h100-sxm": "h100",
    "h100-sxm5": "h100",
    "3090": "rtx3090",
    "rtx-3090": "rtx3090",
    "geforce-rtx-3090": "rtx3090",
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
    "geforce-rtx-4090": "rtx4090",
    "nvidia-l4": "l4",
}


class UnknownGPU(UserError):
    """A GPU name with no sheet here; ``resolve_target`` then tries the word as a TVM tag."""


def get_gpu_spec(name: str) -> GPUSpec:
    """Look a GPU up by short name (``h100``), alias, TVM tag or marketing name, optionally followed
    by numeric fields to change (``h100:warp_mma_share=1,l2_latency_cycles=300``): an analyzer
    ablation or a part whose figures differ. The changed spec's ``name`` spells the changes, so a
    target built from it (``GPUSpec.target``'s ``model``) reads back the same spec."""
    if ":" in name:
        base, changes = name.split(":", 1)
        return _changed(get_gpu_spec(base), changes)
    key = name.strip().lower()
    key = key.split("/", 1)[1] if key.startswith("nvidia/") else key
    key = key[len("nvidia-"):] if key.startswith("nvidia-") and key not in _ALIASES else key
    key = _ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    for spec in GPUS.values():
        if spec.marketing_name.lower() == name.strip().lower():
            return spec
    raise UnknownGPU(f"unknown GPU '{name}'; known: {', '.join(sorted(GPUS))}")


def _changed(base: GPUSpec, changes: str) -> GPUSpec:
    """``base`` with the numeric fields ``FIELD=VALUE,...`` changed, named after them."""
    numeric = {f.name for f in dataclasses.fields(GPUSpec) if isinstance(getattr(base, f.name), (int, float))}
    values = {}
    for change in filter(None, (c.strip() for c in changes.split(","))):
        field, _, text = change.partition("=")
        field = field.strip()
        if field not in numeric:
            raise UserError(f"GPU field '{field}' cannot be changed; numeric fields: {', '.join(sorted(numeric))}")
        kind = type(getattr(base, field))
        try:
            value = kind(text.strip())
        except ValueError:
            kind_name = "an integer" if kind is int else "a number"
            raise UserError(f"GPU field {field} takes {kind_name}, not '{text.strip()}'") from None
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"GPU field {field} must be finite and above 0, not '{text.strip()}'")
        values[field] = value
    if not values:
        return base
    name = base.name + ":" + ",".join(f"{field}={values[field]!r}" for field in sorted(values))
    return dataclasses.replace(base, name=name, **values)


# Which part an architecture means when a target does not name one (TVM's own tags do not): the
# part TVM's tag for that architecture describes.
_PART_BY_ARCH_ORDER = ["h100", "a100", "rtx4090", "rtx3090"]
_WARNED_ARCHS: set = set()


def compute_capability(arch: str) -> Optional[int]:
    """``sm_90a`` -> 90; None for anything else."""
    found = re.fullmatch(r"sm_(\d+)[a-z]?", arch.strip())
    return int(found.group(1)) if found else None


def spec_for_target(target) -> GPUSpec:
    """The GPU a CUDA target is for: the spec its ``model`` attribute names (``GPUSpec.target``
    sets it), else the usual part of its ``arch`` (``nvidia/nvidia-h100`` -> h100; sm_90 and sm_90a
    alike). An architecture without a sheet gets the sheet nearest in compute capability (the lower
    one on a tie), with a one-line warning naming both; a target without an ``sm_XY`` arch is one
    UserError line."""
    model = str(target.attrs.get("model", "") or "")
    if model in GPUS or ":" in model:
        return get_gpu_spec(model)
    arch = str(target.attrs.get("arch", ""))
    ordered = [GPUS[name] for name in _PART_BY_ARCH_ORDER] + [
        spec for name, spec in GPUS.items() if name not in _PART_BY_ARCH_ORDER]
    wanted = compute_capability(arch)
    if wanted is None:
        raise UserError(f"target '{target}' has no sm_XY arch: no GPU sheet applies to it")
    same = [spec for spec in ordered if spec.arch == arch] + [
        spec for spec in ordered if compute_capability(spec.arch) == wanted]
    if same:
        return same[0]
    nearest = min(ordered, key=lambda spec: (abs(compute_capability(spec.arch) - wanted),
                                             compute_capability(spec.arch)))
    if arch not in _WARNED_ARCHS:
        _WARNED_ARCHS.add(arch)
        logging.getLogger("ms_pruner").warning(
            "ms-pruner: warning: no GPU sheet for %s; the analyzer uses %s's (%s), the nearest compute "
            "capability", arch, nearest.name, nearest.arch)
    return nearest


def spec_from_device_name(device_name: str) -> Optional[GPUSpec]:
    """Map a CUDA device name (e.g. 'NVIDIA H100 80GB HBM3') to a spec, or None."""
    lowered = device_name.lower()
    rules = [
        ("h200", "h200"),
        ("h100 pcie", "h100-pcie"),
        ("h100", "h100"),
        ("a100", "a100-80gb" if "80gb" in lowered else "a100"),
        ("3090", "rtx3090"),
        ("4090", "rtx4090"),
        (" l4", "l4"),
    ]
    for needle, name in rules:
        if needle in lowered:
            return GPUS[name]
    return None
