"""Named suites of workloads for benchmarks and comparisons."""

from __future__ import annotations

from typing import Dict, List

from ..errors import UserError
from .spec import Workload, parse_workload

# ResNet-50 (v1.5, 224x224 input) convolution layers, batch 16, NHWC. The 7x7 stem (3 input
# channels) is left out: it has no tensor-core friendly reduction.
_RESNET50_CONVS = [
    "16x56x56x64x64k1s1p0",
    "16x56x56x64x64k3s1p1",
    "16x56x56x64x256k1s1p0",
    "16x56x56x256x64k1s1p0",
    "16x56x56x256x128k1s1p0",
    "16x56x56x128x128k3s2p1",
    "16x28x28x128x512k1s1p0",
    "16x56x56x256x512k1s2p0",
    "16x28x28x512x128k1s1p0",
    "16x28x28x128x128k3s1p1",
    "16x28x28x512x256k1s1p0",
    "16x28x28x256x256k3s2p1",
    "16x14x14x256x1024k1s1p0",
    "16x28x28x512x1024k1s2p0",
    "16x14x14x1024x256k1s1p0",
    "16x14x14x256x256k3s1p1",
    "16x14x14x1024x512k1s1p0",
    "16x14x14x512x512k3s2p1",
    "16x7x7x512x2048k1s1p0",
    "16x14x14x1024x2048k1s2p0",
    "16x7x7x2048x512k1s1p0",
    "16x7x7x512x512k3s1p1",
]

# The tensor-core benchmark: the two headline kernels first, then the kinds and shapes users tune
# (BERT-base at batch 16 x 128 tokens, 12 heads of 64; ResNet-50 stages at batch 16).
_TENSORCORE = [
    "matmul:4096x4096x4096:float16:float32",  # the headline GEMM
    "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32",  # the headline conv: ResNet-50 stage 1, 3x3
    "matmul_nt:2048x2304x768:float16:float32",  # BERT fused QKV projection
    "dense_bias_relu:2048x3072x768:float16:float32",  # BERT FFN up (ReLU stands in for GELU)
    "batch_matmul:192x128x128x64:float16:float32",  # attention Q @ K^T
    "matmul:2048x1000x768:float16:float32",  # N = 1000, not a multiple of 16 (a classifier head)
    "matmul:16x4096x4096:float16:float32",  # M = 16: small-batch inference
    "matmul:4096x4096x4096:float16:float16",  # fp16 accumulate
    "conv2d_nhwc:16x56x56x64x256k1s1p0:float16:float32",  # ResNet-50 1x1 expansion
    "conv2d_nhwc:16x56x56x128x128k3s2p1:float16:float32",  # ResNet-50 3x3, stride 2
]

SUITES: Dict[str, List[str]] = {
    "tensorcore": _TENSORCORE,
    "resnet50-convs": [f"conv2d_nhwc:{d}:float16:float32" for d in _RESNET50_CONVS],
    "cpu-small": [
        "matmul:128x128x128:float32:float32",
        "matmul_nt:128x128x128:float32:float32",
        "dense_bias_relu:64x128x128:float32:float32",
        "batch_matmul:4x64x64x64:float32:float32",
        "conv2d_nhwc:1x14x14x32x32k3s1p1:float32:float32",
    ],
}


def get_suite(name: str) -> List[Workload]:
    if name not in SUITES:
        raise UserError(f"unknown suite '{name}'; known: {', '.join(sorted(SUITES))}")
    return [parse_workload(spec) for spec in SUITES[name]]
