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

# BERT-base encoder layer GEMMs, batch 16 x sequence 128 tokens (M = 2048), 12 heads of 64.
_BERT_GEMMS = [
    "matmul_nt:2048x2304x768",  # fused QKV projection
    "batch_matmul:192x128x128x64",  # Q @ K^T
    "batch_matmul:192x128x64x128",  # softmax(QK^T) @ V
    "matmul_nt:2048x768x768",  # attention output projection
    "dense_bias_relu:2048x3072x768",  # FFN up (ReLU stands in for GELU)
    "matmul_nt:2048x768x3072",  # FFN down
]

SUITES: Dict[str, List[str]] = {
    "resnet50-convs": [f"conv2d_nhwc:{d}:float16:float32" for d in _RESNET50_CONVS],
    "bert-gemms": [f"{s}:float16:float32" for s in _BERT_GEMMS],
    "tensorcore-small": [
        "matmul:4096x4096x4096:float16:float32",
        "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32",
    ],
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
