"""What ptxas allots a candidate's CUDA kernels: registers per thread, spills, stack, shared memory.

The analyzer estimates registers from the accumulator and operand fragments a warp holds; ptxas
decides them. A kernel that needs more than it may have (255 per thread, or what
``__launch_bounds__`` leaves) keeps the rest in local memory and loads and stores it around
its MMAs, which no latency model of the TIR sees directly. ptxas says so without a GPU, so this
is the one part of a kernel's cost that can be checked on any machine with nvcc.

The compile is TVM's own (``tvm.support.nvcc``: ``-O3``, ``--use_fast_math``, ptxas ``-v`` and
``--register-usage-level``), run here because TVM discards ptxas's report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import tempfile
from typing import Dict, List, Tuple

import tvm
from tvm.support import nvcc

from .cuda_compile import compile_callback
from .worker import cuda_sources

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


@contextlib.contextmanager
def reporting_cuda_compile(arch: str, reports: Dict[str, List[KernelResources]]):
    """While open, code generation that compiles CUDA itself (where TVM's CUDA runtime is loaded: a
    GPU machine) compiles through ``cuda_source_compile`` for ``arch`` and leaves ptxas's report in
    ``reports[source]``, so a candidate is compiled once for both; the callback before it is put back
    on exit. Open it once around threads that lower with ``use_nvcc=False``, which then register nothing."""
    def compile_and_report(source: str, *_unused) -> bytes:
        cubin, kernels = cuda_source_compile(source, arch)
        reports[source] = kernels
        return cubin

    with compile_callback(compile_and_report):
        yield reports


def candidate_resources(mod, target) -> List[KernelResources]:
    """Lower a scheduled IRModule for a CUDA target and report its kernels' resources.

    Lowering is the builder's (``lower_candidate``, with the storage-rewrite fix), so these are the
    kernels the builder ships. Needs nvcc, not a GPU.
    """
    if target.kind.name != "cuda":
        raise ValueError(f"register report needs a CUDA target, not {target.kind.name}")
    return [k for source in cuda_sources(mod, target) for k in cuda_source_resources(source, str(target.arch))]


def allocated_shared_bytes(lowered_mod) -> List[int]:
    """Shared memory each device function of a lowered module allocates, in bytes (TVM's
    ``shared``/``shared.dyn`` buffers; after MergeSharedMemoryAllocations the dynamic ones are one
    buffer). ptxas reports only the static part, and a dynamic allocation's size reaches the GPU as
    a launch argument, so the lowered TIR is where both can be read without a GPU."""
    totals = []
    for _, func in lowered_mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        found = [0]
        _add_shared_allocations(func.body, found)
        if found[0]:
            totals.append(found[0])
    return totals


def _add_shared_allocations(stmt, found: List[int]) -> None:
    stack = [stmt]
    while stack:
        node = stack.pop()
        if type(node).__name__ == "AllocBuffer" and node.buffer.scope().startswith("shared"):
            elements = 1
            for extent in node.buffer.shape:
                elements *= int(extent)
            found[0] += elements * max(1, node.buffer.dtype.bits // 8)
        for attr in ("body", "then_case", "else_case"):
            child = getattr(node, attr, None)
            if child is not None and hasattr(child, "span"):
                stack.append(child)
        stack.extend(getattr(node, "seq", None) or [])
