"""ptxas's report of a CUDA source: registers per thread, spills, stack and static shared memory of
each kernel, from a compile as TVM's (``tvm.support.nvcc``: ``-O3``, ``--use_fast_math``, ptxas
``-v`` and ``--register-usage-level``), run here because TVM discards that report. It imports
nothing of the lowering path, so a fix to the generated source (parity_unroll.py) can compile.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from typing import List, Tuple

from tvm.support import nvcc

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """ptxas's report for one entry function."""

    name: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    static_smem_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def parse_ptxas_report(text: str) -> List[KernelResources]:
    """The entry functions of a ``ptxas -v`` report, in the order ptxas compiled them.

    Device functions ptxas reports without "Compiling entry function" are not kernels and are
    skipped; an entry whose report lacks the register line is an error (a truncated report).
    """
    kernels: List[KernelResources] = []
    name = None
    frame = (0, 0, 0)
    for line in text.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            name, frame = entry.group(1), (0, 0, 0)
            continue
        if name is None:
            continue
        spill = _FRAME.search(line)
        if spill:
            frame = tuple(int(g) for g in spill.groups())
            continue
        used = _USED.search(line)
        if used:
            smem = _SMEM.search(line)
            kernels.append(KernelResources(name, int(used.group(1)), *frame,
                                           static_smem_bytes=int(smem.group(1)) if smem else 0))
            name = None
    if name is not None:
        raise ValueError(f"ptxas report for '{name}' has no register count")
    return kernels


def _nvcc_command(arch: str, source_path: str, output_path: str) -> List[str]:
    ptxas_flags = getattr(nvcc, "_ptxas_option_flags", lambda: ["-v"])()
    if "-v" not in ptxas_flags:
        ptxas_flags = ["-v", *ptxas_flags]
    suffix = arch.replace("sm_", "")
    fast_math = [] if os.environ.get("TVM_CUDA_NVCC_NO_FAST_MATH") else ["--use_fast_math"]
    return ["nvcc", "--cubin", "-O3", "-gencode", f"arch=compute_{suffix},code=sm_{suffix}",
            "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "--expt-relaxed-constexpr",
            *fast_math, f"--ptxas-options={','.join(ptxas_flags)}", "-o", output_path, source_path]


def cuda_source_compile(source: str, arch: str) -> Tuple[bytes, List[KernelResources]]:
    """Compile CUDA source for ``arch`` (``sm_90``) as TVM does: the cubin and ptxas's report."""
    with tempfile.TemporaryDirectory(prefix="ms_pruner_ptxas_") as tmp:
        source_path, cubin_path = os.path.join(tmp, "kernels.cu"), os.path.join(tmp, "kernels.cubin")
        with open(source_path, "w") as f:
            f.write(source)
        proc = subprocess.run(_nvcc_command(arch, source_path, cubin_path), capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"nvcc failed for {arch}: {last[0]}")
        with open(cubin_path, "rb") as f:
            cubin = f.read()
    return cubin, parse_ptxas_report(proc.stdout + proc.stderr)


def cuda_source_resources(source: str, arch: str) -> List[KernelResources]:
    """Compile CUDA source for ``arch`` (``sm_90``) as TVM does and read ptxas's report."""
    return cuda_source_compile(source, arch)[1]
