"""Workload spec strings (``matmul:4096x4096x4096:float16:float32``) and the Workload they name."""

from __future__ import annotations

import dataclasses
import re
from typing import List, Sequence, Tuple

import numpy as np
from tvm import te

from ..errors import UserError
from .definitions import KINDS

SUPPORTED_IN_DTYPES = ("float16", "float32")
SUPPORTED_OUT_DTYPES = ("float16", "float32")

# Largest normalised error (``relative_error``) a correct kernel shows: fp32 results of fp16 products
# accumulated in fp32, and fp16 results (accumulated in fp16 by the fp16 mma groups, ~sqrt(K)
# roundings of 2^-11).
OUTPUT_TOLERANCE = {"float32": 1e-3, "float16": 5e-2}

_CONV_DIMS = re.compile(r"^(\d+)x(\d+)x(\d+)x(\d+)x(\d+)k(\d+)s(\d+)p(\d+)$")


@dataclasses.dataclass(frozen=True)
class Workload:
    """A named, parameterised operator: ``kind`` with integer ``dims`` and in/out dtypes."""

    kind: str
    dims: Tuple[int, ...]
    in_dtype: str = "float32"
    out_dtype: str = "float32"

    @property
    def spec(self) -> str:
        if self.kind == "conv2d_nhwc":
            n, h, w, ci, co, k, s, p = self.dims
            dims = f"{n}x{h}x{w}x{ci}x{co}k{k}s{s}p{p}"
        else:
            dims = "x".join(str(d) for d in self.dims)
        return f"{self.kind}:{dims}:{self.in_dtype}:{self.out_dtype}"

    @property
    def flops(self) -> float:
        """Useful floating-point operations (2 per multiply-add), for TFLOP/s figures."""
        return KINDS[self.kind].flops(self.dims)

    @property
    def uses_tensor_cores(self) -> bool:
        return self.in_dtype == "float16"

    def te_tensors(self) -> list:
        return KINDS[self.kind].build(self.dims, self.in_dtype, self.out_dtype)

    def prim_func(self):
        """The workload as a TensorIR PrimFunc (what ``ms.tune_tir`` takes)."""
        return te.create_prim_func(self.te_tensors())

    def random_inputs(self, seed: int = 0) -> List[np.ndarray]:
        """Random inputs in [-1, 1), one array per input tensor, in argument order."""
        rng = np.random.default_rng(seed)
        arrays = []
        for tensor in self.te_tensors()[:-1]:
            shape = [int(x) for x in tensor.shape]
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(str(tensor.dtype)))
        return arrays

    def output_shape(self) -> Tuple[int, ...]:
        return tuple(int(x) for x in self.te_tensors()[-1].shape)

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The exact result in float64, computed with numpy."""
        return KINDS[self.kind].ref(inputs, self.dims)

    @property
    def tolerance(self) -> float:
        return OUTPUT_TOLERANCE.get(self.out_dtype, 1e-3)


def relative_error(out: np.ndarray, exact: np.ndarray) -> float:
    """max |out - exact| / max |exact|: a kernel's error against the exact result."""
    scale = float(np.max(np.abs(exact))) or 1.0
    return float(np.max(np.abs(out.astype(np.float64) - exact))) / scale


def valid_specs_help() -> str:
    lines = []
    for kind in KINDS.values():
        if kind.name == "conv2d_nhwc":
            example = "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32"
        else:
            example = f"{kind.name}:" + "x".join("64" for _ in kind.dim_names) + ":float32:float32"
        lines.append(f"{example}  ({kind.doc})")
    return "; ".join(lines)


def parse_workload(spec: str) -> Workload:
    """Parse ``KIND:DIMS[:IN_DTYPE[:OUT_DTYPE]]``; the output dtype defaults to the input's."""
    parts = spec.strip().split(":")
    kind = parts[0]
    if kind not in KINDS:
        raise UserError(f"unknown workload '{spec}'; valid forms: {valid_specs_help()}")
    if len(parts) < 2 or len(parts) > 4:
        raise UserError(f"workload '{spec}' must look like KIND:DIMS[:IN_DTYPE[:OUT_DTYPE]]; valid forms: "
                        f"{valid_specs_help()}")
    dims = _parse_dims(kind, parts[1], spec)
    in_dtype = parts[2] if len(parts) > 2 else "float32"
    out_dtype = parts[3] if len(parts) > 3 else in_dtype
    if in_dtype not in SUPPORTED_IN_DTYPES:
        raise UserError(f"unsupported input dtype '{in_dtype}' in '{spec}'; supported: "
                        f"{', '.join(SUPPORTED_IN_DTYPES)}")
    if out_dtype not in SUPPORTED_OUT_DTYPES:
        raise UserError(f"unsupported output dtype '{out_dtype}' in '{spec}'; supported: "
                        f"{', '.join(SUPPORTED_OUT_DTYPES)}")
    if in_dtype == "float32" and out_dtype == "float16":
        raise UserError(f"unsupported dtype pair in '{spec}': float32 inputs with float16 output")
    return Workload(kind=kind, dims=dims, in_dtype=in_dtype, out_dtype=out_dtype)


def _parse_dims(kind: str, text: str, spec: str) -> Tuple[int, ...]:
    expected = KINDS[kind].dim_names
    if kind == "conv2d_nhwc":
        match = _CONV_DIMS.match(text)
        if not match:
            raise UserError(f"bad conv2d_nhwc dims '{text}' in '{spec}'; expected NxHxWxCIxCOkKsSpP, "
                            "e.g. 16x56x56x64x64k3s1p1")
        dims = tuple(int(x) for x in match.groups())
    else:
        try:
            dims = tuple(int(x) for x in text.split("x"))
        except ValueError:
            dims = ()
        if len(dims) != len(expected):
            raise UserError(f"bad {kind} dims '{text}' in '{spec}'; expected {'x'.join(expected)}")
        if min(dims) <= 0:
            raise UserError(f"dims must be positive in '{spec}'")
        return dims
    n, h, w, ci, co, k, s, p = dims
    if min(n, h, w, ci, co, k, s) <= 0 or h + 2 * p < k or w + 2 * p < k:
        raise UserError(f"conv2d_nhwc dims '{text}' in '{spec}' give an empty output")
    return dims


def as_workload(workload) -> Workload:
    """Accept a Workload or a spec string."""
    if isinstance(workload, Workload):
        return workload
    return parse_workload(workload)
