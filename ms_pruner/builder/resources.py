"""What ptxas allots a candidate's CUDA kernels: registers per thread, spills, stack, shared memory.

The analyzer estimates registers from the accumulator and operand fragments a warp holds; ptxas
decides them. A kernel that needs more than it may have (255 per thread, or what
``__launch_bounds__`` leaves) keeps the rest in local memory and loads and stores it around
its MMAs, which no latency model of the TIR sees directly. ptxas says so without a GPU, so this
is the one part of a kernel's cost that can be checked on any machine with nvcc.

The compile and its report are ptxas.py's; here they meet TVM's lowering and code generation.
"""

from __future__ import annotations

import contextlib
from typing import Dict, List

import tvm

from .cuda_compile import compile_callback
from .ptxas import KernelResources, cuda_source_compile, cuda_source_resources, parse_ptxas_report
from .worker import cuda_sources

__all__ = ["KernelResources", "allocated_shared_bytes", "candidate_resources", "cuda_source_compile",
           "cuda_source_resources", "parse_ptxas_report", "reporting_cuda_compile"]


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
