"""torch's own kernel for a workload (cuBLAS, cuDNN on a GPU), the bar a comparison reports beside
stock MetaSchedule and Pruner, and the output tests check a tuned kernel against."""

from __future__ import annotations

import time
from typing import Optional

from ..workloads import Workload


GEMM_KINDS = ("matmul", "matmul_nt", "batch_matmul", "dense_bias", "dense_bias_relu")


def torch_operation(workload, inputs, device: str):
    """(what, a callable computing ``workload`` with torch on ``inputs`` (numpy, the workload's own
    layouts), its output in the workload's layout), or None where torch has no single op for it.

    GEMMs are torch.matmul (cuBLAS on a GPU), then the bias add and relu where the workload has
    them (separate eager kernels); ``conv2d_nhwc`` is ``F.conv2d`` on channels_last tensors
    (cuDNN's NHWC kernels on a GPU), the layout being tuned. torch computes in the input dtype
    (an fp16 GEMM gives fp16 out where the workload accumulates into fp32).
    """
    import torch  # lazy: torch only for the reference operator

    gpu = device == "cuda"
    tensors = [torch.from_numpy(x).to(device) for x in inputs]
    if workload.kind in GEMM_KINDS:
        a, b = tensors[:2]
        if workload.kind in ("matmul_nt", "dense_bias", "dense_bias_relu"):
            b = b.t() if b.dim() == 2 else b.transpose(1, 2)
        extra = tensors[2] if workload.kind.startswith("dense_bias") else None
        relu = workload.kind == "dense_bias_relu"

        def gemm():
            out = torch.matmul(a, b)
            if extra is not None:
                out = out + extra
            return torch.relu(out) if relu else out

        return ("cuBLAS (torch.matmul)" if gpu else "torch.matmul (CPU)"), gemm, lambda out: out
    if workload.kind == "conv2d_nhwc":
        _, _, _, _, _, _, stride, pad = workload.dims
        x = tensors[0].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)  # NHWC -> NCHW view
        w = tensors[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)  # HWIO -> OIHW

        def conv():
            return torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)

        return ("cuDNN (torch conv2d, channels_last)" if gpu else "torch conv2d (CPU, channels_last)"), conv, \
            lambda out: out.permute(0, 2, 3, 1)
    return None


def reference_latency(workload, on_gpu: bool) -> Optional[dict]:
    """torch's time for the same operator (cuBLAS / cuDNN on a GPU, torch's CPU kernels otherwise);
    None where torch has no such operator (a user's own kernel has none), or ``on_gpu`` and torch sees
    no GPU here."""
    if not isinstance(workload, Workload):
        return None
    import torch  # lazy: torch only for the reference operator

    if on_gpu and not torch.cuda.is_available():
        return None
    device = "cuda" if on_gpu else "cpu"
    if device == "cpu" and workload.in_dtype == "float16":
        return None
    operation = torch_operation(workload, workload.random_inputs(), device)
    if operation is None:
        return None
    name, run, _ = operation
    for _ in range(3):
        run()
    repeats = 20
    if device == "cuda":
        torch.cuda.synchronize()
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
        for _ in range(repeats):
            run()
        end_event.record()
        torch.cuda.synchronize()
        seconds = start_event.elapsed_time(end_event) / 1e3 / repeats
    else:
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        seconds = (time.perf_counter() - start) / repeats
    return {"what": name, "latency_s": seconds, "tflops": workload.flops / seconds / 1e12}
