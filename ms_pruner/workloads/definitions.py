"""TensorIR definitions of the workloads, written in TE, plus numpy references for checking.

``matmul`` and ``conv2d_nhwc`` are MetaSchedule's own ``te_workload`` helpers, so their structural
hash matches databases tuned with them (such as the H100 records in ``../shared/data``); the other
kinds follow the same naming (A, B, C) and casts.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from tvm import te, topi
from tvm.s_tir.meta_schedule.testing import te_workload

# Each builder takes (dims tuple, in_dtype, out_dtype) and returns the TE tensors (inputs..., out).


def _matmul(dims, in_dtype, out_dtype):
    m, n, k = dims
    return list(te_workload.matmul(m, n, k, in_dtype=in_dtype, out_dtype=out_dtype))


def _matmul_nt(dims, in_dtype, out_dtype):
    m, n, k = dims
    a = te.placeholder((m, k), name="A", dtype=in_dtype)
    b = te.placeholder((n, k), name="B", dtype=in_dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute(
        (m, n),
        lambda i, j: te.sum(a[i, r].astype(out_dtype) * b[j, r].astype(out_dtype), axis=[r]),
        name="C",
    )
    return [a, b, c]


def _batch_matmul(dims, in_dtype, out_dtype):
    batch, m, n, k = dims
    a = te.placeholder((batch, m, k), name="A", dtype=in_dtype)
    b = te.placeholder((batch, k, n), name="B", dtype=in_dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute(
        (batch, m, n),
        lambda t, i, j: te.sum(a[t, i, r].astype(out_dtype) * b[t, r, j].astype(out_dtype), axis=[r]),
        name="C",
    )
    return [a, b, c]


def _dense_bias(dims, in_dtype, out_dtype, relu=False):
    m, n, k = dims
    a = te.placeholder((m, k), name="A", dtype=in_dtype)
    w = te.placeholder((n, k), name="W", dtype=in_dtype)
    bias = te.placeholder((n,), name="bias", dtype=out_dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute(
        (m, n),
        lambda i, j: te.sum(a[i, r].astype(out_dtype) * w[j, r].astype(out_dtype), axis=[r]),
        name="C",
    )
    d = te.compute((m, n), lambda i, j: c[i, j] + bias[j], name="D")
    if relu:
        d = topi.nn.relu(d)
    return [a, w, bias, d]


def _dense_bias_relu(dims, in_dtype, out_dtype):
    return _dense_bias(dims, in_dtype, out_dtype, relu=True)


def _conv2d_nhwc(dims, in_dtype, out_dtype):
    n, h, w, ci, co, ksize, stride, pad = dims
    return list(te_workload.conv2d_nhwc(n, h, w, ci, co, ksize, stride, pad, in_dtype=in_dtype, out_dtype=out_dtype))


def _conv_out_hw(dims) -> Tuple[int, int]:
    _, h, w, _, _, ksize, stride, pad = dims
    return (h + 2 * pad - ksize) // stride + 1, (w + 2 * pad - ksize) // stride + 1


def _gemm_flops(dims) -> float:
    m, n, k = dims[-3:]
    batch = dims[0] if len(dims) == 4 else 1
    return 2.0 * batch * m * n * k


def _conv_flops(dims) -> float:
    n, _, _, ci, co, ksize, _, _ = dims
    out_h, out_w = _conv_out_hw(dims)
    return 2.0 * n * out_h * out_w * co * ci * ksize * ksize


def _ref_matmul(args: Sequence[np.ndarray], dims) -> np.ndarray:
    return args[0].astype("float64") @ args[1].astype("float64")


def _ref_matmul_nt(args, dims):
    return args[0].astype("float64") @ args[1].astype("float64").T


def _ref_batch_matmul(args, dims):
    return np.matmul(args[0].astype("float64"), args[1].astype("float64"))


def _ref_dense_bias(args, dims, relu=False):
    out = args[0].astype("float64") @ args[1].astype("float64").T + args[2].astype("float64")
    return np.maximum(out, 0.0) if relu else out


def _ref_conv2d_nhwc(args, dims):
    n, _, _, ci, co, ksize, stride, pad = dims
    x = np.pad(args[0].astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    wgt = args[1].astype("float64")
    out_h, out_w = _conv_out_hw(dims)
    out = np.zeros((n, out_h, out_w, co))
    for dy in range(ksize):
        for dx in range(ksize):
            patch = x[:, dy : dy + stride * out_h : stride, dx : dx + stride * out_w : stride, :]
            out += np.einsum("nhwc,co->nhwo", patch, wgt[dy, dx])
    return out


@dataclasses.dataclass(frozen=True)
class Kind:
    """One workload family: its TE builder, dimension names, FLOP count and numpy reference."""

    name: str
    dim_names: List[str]
    build: Callable
    flops: Callable
    ref: Callable
    doc: str


KINDS: Dict[str, Kind] = {
    k.name: k
    for k in [
        Kind("matmul", ["M", "N", "K"], _matmul, _gemm_flops, _ref_matmul,
             "C[M,N] = A[M,K] @ B[K,N] (NN layout)"),
        Kind("matmul_nt", ["M", "N", "K"], _matmul_nt, _gemm_flops, _ref_matmul_nt,
             "C[M,N] = A[M,K] @ B[N,K]^T (NT layout, torch Linear weights)"),
        Kind("batch_matmul", ["B", "M", "N", "K"], _batch_matmul, _gemm_flops, _ref_batch_matmul,
             "C[B,M,N] = A[B,M,K] @ B[B,K,N]"),
        Kind("dense_bias", ["M", "N", "K"], _dense_bias, _gemm_flops, _ref_dense_bias,
             "D[M,N] = A[M,K] @ W[N,K]^T + bias[N]"),
        Kind("dense_bias_relu", ["M", "N", "K"], _dense_bias_relu, _gemm_flops,
             lambda args, dims: _ref_dense_bias(args, dims, relu=True),
             "D[M,N] = relu(A[M,K] @ W[N,K]^T + bias[N])"),
        Kind("conv2d_nhwc", ["N", "H", "W", "CI", "CO", "k", "s", "p"], _conv2d_nhwc, _conv_flops,
             _ref_conv2d_nhwc, "NHWC input, HWIO weight, square kernel k, stride s, padding p"),
    ]
}
