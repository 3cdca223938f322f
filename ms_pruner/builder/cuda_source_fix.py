"""Fixes to TVM's generated CUDA source, applied through TVM's ``tvm_callback_cuda_postproc`` hook:
the one below, and loops that index register arrays by their parity unrolled (parity_unroll.py).

TVM 0.27's CUDA code generator stores an 8-lane int32 vector in a ``longlong4`` and an 8-lane fp16
one in a ``uint4``, and writes a vector built from eight values as ``make_longlong4(a, ..., h)`` or
``make_uint4(a, ..., h)``, which take four, so nvcc stops ("too many arguments in function call").
The mma rule's permuted shared layout makes such vectors where the simplifier cannot prove the
swizzle of a 16-byte copy one value for all its lanes (the swizzled index, and the fp16 values then
gathered with it): on the 2048x3072x768 GEMMs of BERT 7 of 16 sampled mma candidates failed so
(``ms-pruner space --build``). The code that reads such a vector takes lanes 2i and 2i+1 as the low
and high half of its i-th 8-byte (4-byte) word (``((int2*)(&(v.x)))->y``, ``((half2*)(&(v.x)))->y``),
so the fix builds it that way, through ``int2`` and ``half2``.
"""

from __future__ import annotations

from typing import List, Tuple

import tvm_ffi

from .parity_unroll import unrolled_where_registers_hold
from .ptxas import sm_arch

CALLBACK_NAME = "tvm_callback_cuda_postproc"
# call -> (helper, vector type, lane type, pair type, pair constructor)
EIGHT_LANE_CALLS = {
    "make_longlong4(": ("tvm_ms_pruner_int32x8", "longlong4", "int", "int2", "make_int2"),
    "make_uint4(": ("tvm_ms_pruner_half8", "uint4", "half", "half2", "__halves2half2"),
}


def _helper_source(helper: str, vector: str, lane: str, pair: str, make_pair: str) -> str:
    """A device function building ``vector`` from eight ``lane`` values, lanes 2i and 2i+1 its i-th ``pair``."""
    names = "abcdefgh"
    params = ", ".join(f"{lane} {n}" for n in names)
    fills = "".join(f"  pairs[{i}] = {make_pair}({names[2 * i]}, {names[2 * i + 1]});\n" for i in range(4))
    return (f"__device__ __forceinline__ {vector} {helper}({params}) {{\n  {vector} v;\n"
            f"  {pair}* pairs = ({pair}*)(&v);\n{fills}  return v;\n}}\n")


HELPER_SOURCE = "\n" + "".join(_helper_source(*spec) for spec in EIGHT_LANE_CALLS.values())


def _arguments(source: str, start: int) -> Tuple[List[str], int]:
    """The top-level arguments of the call whose "(" is at ``start``, and the index after its ")"."""
    depth, pieces, begin = 0, [], start + 1
    for index in range(start, len(source)):
        char = source[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                pieces.append(source[begin:index])
                return pieces, index + 1
        elif char == "," and depth == 1:
            pieces.append(source[begin:index])
            begin = index + 1
    raise ValueError("unbalanced parentheses in generated CUDA source")


def _replace_calls(source: str, call: str, helper: str) -> str:
    """``source`` with each eight-argument ``call`` made a call of ``helper``."""
    out, position = [], 0
    while True:
        found = source.find(call, position)
        if found < 0:
            break
        arguments, end = _arguments(source, found + len(call) - 1)
        out.append(source[position:found])
        out.append(f"{helper}({','.join(arguments)})" if len(arguments) == 8 else source[found:end])
        position = end
    out.append(source[position:])
    return "".join(out)


def fix_eight_lane_vectors(source: str) -> str:
    """``source`` with each eight-argument ``make_longlong4``/``make_uint4`` built by a helper
    defined before the first kernel; unchanged where there is none."""
    text = source
    for call, (helper, *_) in EIGHT_LANE_CALLS.items():
        text = _replace_calls(text, call, helper)
    if text == source:
        return source
    kernel = text.find('extern "C" __global__')
    kernel = kernel if kernel >= 0 else 0
    return text[:kernel] + HELPER_SOURCE + "\n" + text[kernel:]


def _postproc(source, target=None):
    """The eight-lane fix, then parity loops unrolled where their registers hold (parity_unroll.py)."""
    fixed = fix_eight_lane_vectors(str(source))
    arch = sm_arch(target)
    return unrolled_where_registers_hold(fixed, arch) if arch else fixed


def register_cuda_source_fix() -> None:
    """Register the fixes as TVM's CUDA postprocessing callback where no other one is registered."""
    if tvm_ffi.get_global_func(CALLBACK_NAME, allow_missing=True) is None:
        tvm_ffi.register_global_func(CALLBACK_NAME, _postproc)
