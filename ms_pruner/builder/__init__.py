"""A MetaSchedule builder that builds every candidate the stock path loses, and runner settings.

``make_builder("pruner")`` fixes four measured problems of the stock LocalBuilder on TVM 0.27:
fp16->fp32 tensor-core candidates failing to lower, ~23 s of ``tensor_intrin`` import in every
fresh worker, and CUDA compiled by NVRTC (missing ``cuda-bindings`` fails every build on a GPU
machine) or lazily inside the one-GPU runner (``cuda_compile``); and its worker processes, started
afresh for every batch, are kept across batches (``pool``). ``make_builder("stock")`` is
MetaSchedule's own builder, kept for side-by-side comparisons. ``make_runner`` is MetaSchedule's
``LocalRunner`` that fills a task's arguments once instead of once per candidate (``runner_args``)
and outlives a kernel that breaks its CUDA context (``runner``).
"""

from __future__ import annotations

import os
from typing import Optional

import psutil
from tvm.s_tir import meta_schedule as ms

from ..errors import UserError
from .copy_lanes import COPY_LANES_ENV, copy_lanes_separated, prepare_permuted_copies
from .cubin_cache import CUBIN_CACHE_ENV, cache_folder, run_cubin_cache
from .cuda_binary import compile_cuda_to_cubin, device_module_formats, packed_device_code, replace_cuda_sources
from .cuda_compile import compile_with_nvcc, cuda_compile_scope, cuda_runtime_loaded
from .fused_epilogue import FUSE_EPILOGUE_ENV, epilogue_fused, fuse_fragment_epilogues, fused_func
from .parity_unroll import PARITY_UNROLL_ENV, parity_loops_unrolled
from .pool import KeptPoolBuilder
from .resources import KernelResources, candidate_resources, cuda_source_resources, parse_ptxas_report
from .runner import RecoveringLocalRunner, breaks_cuda_context, target_device_type
from .runner_args import (alloc_argument, cached_alloc_argument, forget_cached_arguments, rpc_alloc_argument,
                          zero_integer_arguments)
from .wait_counts import PRUNER_TIR_PIPELINE, register_pruner_pipeline
from .worker import (COMPILE_DEVICE_CODE_ENV, BuiltCandidate, build_candidate, build_pass_config, cuda_modules,
                     cuda_sources, export_candidate, exported, lower_candidate, rewritten_schedule, with_device_code,
                     write_library)

BUILDER_KINDS = ("pruner", "stock")


def default_max_workers() -> int:
    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


def make_builder(
    kind: str = "pruner",
    max_workers: Optional[int] = None,
    timeout_sec: float = 120.0,
    compile_device_code: bool = True,
    share_cubins: bool = True,
):
    """Our build/export functions in a ``KeptPoolBuilder`` (LocalBuilder's build, its worker processes
    kept across batches: pool.py), or MetaSchedule's own ``LocalBuilder`` (``"stock"``). With
    ``share_cubins=False`` its workers compile every candidate, whatever the run's cubin folder holds."""
    workers = max_workers or default_max_workers()
    if kind == "stock":
        return ms.builder.LocalBuilder(max_workers=workers)
    if kind != "pruner":
        raise UserError(f"unknown builder '{kind}'; choose one of {', '.join(BUILDER_KINDS)}")

    return KeptPoolBuilder(max_workers=workers, timeout_sec=timeout_sec, f_build=build_candidate,
                           f_export=export_candidate,
                           environment={COMPILE_DEVICE_CODE_ENV: "1" if compile_device_code else "0",
                                        COPY_LANES_ENV: "1" if copy_lanes_separated() else "0",
                                        PARITY_UNROLL_ENV: "1" if parity_loops_unrolled() else "0",
                                        CUBIN_CACHE_ENV: (share_cubins and cache_folder()) or "0"})


def close_builder(builder) -> None:
    """Stop a builder's kept worker processes (``KeptPoolBuilder``); nothing for other builders."""
    close = getattr(builder, "close", None)
    if callable(close):
        close()


def start_builder_workers(builder) -> None:
    """Start a builder's kept worker processes now (``KeptPoolBuilder``); nothing for other builders."""
    start = getattr(builder, "start_workers", None)
    if callable(start):
        start()


def make_runner(timeout_sec: float = 30.0, number: int = 3, repeat: int = 1, min_repeat_ms: int = 100,
                reuse_arguments: bool = True):
    """MetaSchedule's ``LocalRunner`` with explicit evaluator settings (the same for every strategy),
    restarting its worker after a kernel breaks the CUDA context (``runner``), integer arguments zeros.

    ``reuse_arguments`` keeps one task's random-filled arguments in the runner's worker for the
    next candidate of the same shapes (``runner_args``) instead of filling them anew each time.
    """
    config = ms.runner.EvaluatorConfig(
        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False
    )
    return RecoveringLocalRunner(timeout_sec=timeout_sec, evaluator_config=config,
                                 f_alloc_argument=cached_alloc_argument if reuse_arguments else alloc_argument)


__all__ = [
    "BUILDER_KINDS",
    "COPY_LANES_ENV",
    "FUSE_EPILOGUE_ENV",
    "PARITY_UNROLL_ENV",
    "PRUNER_TIR_PIPELINE",
    "BuiltCandidate",
    "CUBIN_CACHE_ENV",
    "KernelResources",
    "RecoveringLocalRunner",
    "alloc_argument",
    "breaks_cuda_context",
    "build_candidate",
    "build_pass_config",
    "close_builder",
    "cached_alloc_argument",
    "candidate_resources",
    "compile_cuda_to_cubin",
    "compile_with_nvcc",
    "copy_lanes_separated",
    "epilogue_fused",
    "fuse_fragment_epilogues",
    "fused_func",
    "parity_loops_unrolled",
    "cuda_compile_scope",
    "cuda_modules",
    "cuda_runtime_loaded",
    "cuda_sources",
    "cuda_source_resources",
    "default_max_workers",
    "device_module_formats",
    "export_candidate",
    "exported",
    "forget_cached_arguments",
    "lower_candidate",
    "make_builder",
    "make_runner",
    "packed_device_code",
    "parse_ptxas_report",
    "replace_cuda_sources",
    "prepare_permuted_copies",
    "register_pruner_pipeline",
    "rewritten_schedule",
    "run_cubin_cache",
    "rpc_alloc_argument",
    "start_builder_workers",
    "target_device_type",
    "with_device_code",
    "write_library",
    "zero_integer_arguments",
]
