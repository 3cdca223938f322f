"""CPU description for the ``llvm`` target: enough for a roofline, read from this machine."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import psutil


@dataclasses.dataclass(frozen=True)
class CPUSpec:
    """Cores, SIMD width and cache sizes of the host CPU."""

    name: str
    physical_cores: int
    simd_bytes: int  # widest vector register: 16 (SSE/NEON), 32 (AVX2), 64 (AVX-512)
    fma_units_per_core: int
    clock_ghz: float
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    dram_gbps: float

    def fp32_gflops(self) -> float:
        lanes = self.simd_bytes // 4
        return self.physical_cores * self.fma_units_per_core * lanes * 2 * self.clock_ghz


def _cpuinfo() -> dict:
    info = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if ":" in line:
                    key, value = line.split(":", 1)
                    info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def _cache_bytes(level: int, kind: Optional[str]) -> int:
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            with open(os.path.join(path, "level"), encoding="utf-8") as handle:
                if int(handle.read()) != level:
                    continue
            with open(os.path.join(path, "type"), encoding="utf-8") as handle:
                cache_type = handle.read().strip()
            if kind is not None and cache_type != kind:
                continue
            with open(os.path.join(path, "size"), encoding="utf-8") as handle:
                text = handle.read().strip().upper()
            scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return {1: 32 * 1024, 2: 1024 * 1024, 3: 8 * 1024 * 1024}[level]


def detect_cpu() -> CPUSpec:
    """Describe the CPU this process runs on (Linux sysfs/procfs; safe defaults elsewhere)."""
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    if "avx512f" in flags:
        simd = 64
    elif "avx2" in flags or "avx" in flags:
        simd = 32
    else:
        simd = 16
    freq = psutil.cpu_freq()
    clock = (freq.max or freq.current) / 1000.0 if freq and (freq.max or freq.current) else 2.5
    return CPUSpec(
        name=info.get("model name", "cpu"),
        physical_cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        simd_bytes=simd,
        fma_units_per_core=2 if simd >= 32 else 1,
        clock_ghz=clock,
        l1d_bytes=_cache_bytes(1, "Data"),
        l2_bytes=_cache_bytes(2, None),
        l3_bytes=_cache_bytes(3, None),
        dram_gbps=20.0,
    )
