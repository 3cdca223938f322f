"""Loops that choose a register array's copy by their own parity, unrolled by two in the CUDA source.

Where the mma rule's fragment loop runs once a stage and its pipeline loads the next stage's
fragments before this stage's MMAs (depth 3 and more), InjectSoftwarePipeline keeps two copies of
each operand fragment and picks one by the parity of the outer k loop: ``A_frag + ((k + 1) & 1) *
128``. That index is known only at run time, and ptxas keeps an array indexed so in local memory,
a stack frame of the fragments' size that every ldmatrix stores to and every MMA loads from. Under
``#pragma unroll 2`` the loop's two halves start at even and odd ``k``, each copy's index is a
constant in each half, and the copies can stay in registers, both of them: the register count grows
by the second copy. Where that exceeds what a thread may have, ptxas spills instead, so the builder
keeps the unrolled source only where ptxas compiles it with no stack and no spill
(``unrolled_where_registers_hold``); the analyzer predicts the same from its register count
(analysis/gpu_model.py ``as_built``).

``MS_PRUNER_UNROLL_PARITY_LOOPS=0`` leaves the source as TVM wrote it, for ablations; the analyzer
reads the same switch (``parity_loops_unrolled``).
"""

from __future__ import annotations

import os
import re
from typing import List, Set, Tuple

from .ptxas import cuda_source_compile

PARITY_UNROLL_ENV = "MS_PRUNER_UNROLL_PARITY_LOOPS"
PRAGMA = "#pragma unroll 2"
# The pipeline's main loop holds the block's barriers; an inner fragment loop of a few trips has none,
# and nvcc unrolls it whole by itself (its parity index then a constant), which a pragma would cap.
BARRIER = "__syncthreads()"
_LOOP = re.compile(r"^([ \t]*)for \(int (\w+) = 0; \2 < (\d+); \+\+\2\) \{$", re.M)
_LOCAL_ARRAY = re.compile(r"^[ \t]*(?:alignas\(\d+\) )?(?:half|float|int|uint|signed char|\w+_t) (\w+)\[\d+\];$", re.M)
_FLOAT_ARRAY = re.compile(r"^[ \t]*(?:alignas\(\d+\) )?float \w+\[(\d+)\];$", re.M)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\((\d+)\)")
KERNEL_START = 'extern "C" __global__'
MAX_REGISTERS, REGISTERS_PER_BLOCK = 255, 65536
_NAMED_VALUE = re.compile(r"^[ \t]*int (\w+) = (.*);$", re.M)


def parity_loops_unrolled() -> bool:
    """Whether the builder unrolls parity loops (``MS_PRUNER_UNROLL_PARITY_LOOPS``, on unless "0")."""
    return os.environ.get(PARITY_UNROLL_ENV, "1") != "0"


def _parity(var: str) -> re.Pattern:
    """``(v & 1)`` or ``((v + c) & 1)``: the parity of loop variable ``v``, with an offset."""
    return re.compile(rf"\((?:{var}|\({var} \+ \d+\)) & 1\)")


def _closing(text: str, start: int) -> int:
    """The index of the bracket that closes the ``{``, ``(`` or ``[`` at ``start``."""
    opening, closing, depth = text[start], {"{": "}", "(": ")", "[": "]"}[text[start]], 0
    for index in range(start, len(text)):
        depth += 1 if text[index] == opening else -1 if text[index] == closing else 0
        if depth == 0:
            return index
    raise ValueError("unbalanced brackets in generated CUDA source")


def _index_at(text: str, start: int) -> str:
    """The index expression at ``start``: a bracketed or parenthesised group, or a word."""
    if text[start] in "([":
        return text[start:_closing(text, start) + 1]
    return re.match(r"\w*", text[start:]).group(0)


def _indexes_local_by_parity(body: str, var: str, local_arrays: Set[str]) -> bool:
    """Whether ``body`` offsets a register array (``frag + (index)``, ``frag[index]``) by an index
    that holds ``var`` only through its parity, written out or through a value the body names
    (``int cse_v1 = ((k & 1) * 128);``). An index that holds ``var`` otherwise stays a run-time
    index in either half of an unrolled loop."""
    parity, uses_var = _parity(var), re.compile(rf"\b{var}\b")
    named = [name for name, value in _NAMED_VALUE.findall(body)
             if parity.search(value) and not uses_var.search(parity.sub("", value))]
    keys = [parity] + [re.compile(rf"\b{name}\b") for name in named]
    for name in local_arrays:
        for use in re.finditer(rf"\b{name}(?: \+ |(?=\[))", body):
            index = _index_at(body, use.end())
            if any(key.search(index) for key in keys) and not uses_var.search(parity.sub("", index)):
                return True
    return False


def _line_before(source: str, start: int) -> str:
    """The last line with text before index ``start``, stripped."""
    end = start
    while end > 0 and source[end - 1].isspace():
        end -= 1
    return source[source.rfind("\n", 0, end) + 1:end].strip()


def unroll_parity_loops(source: str) -> str:
    """``source`` with ``#pragma unroll 2`` before each loop of more than one trip that holds a
    barrier, indexes a register array by its variable's parity and has no unroll pragma yet;
    unchanged where none does."""
    local_arrays = set(_LOCAL_ARRAY.findall(source))
    if not local_arrays:
        return source
    inserts: List[Tuple[int, str]] = []
    for loop in _LOOP.finditer(source):
        indent, var, trips = loop.group(1), loop.group(2), int(loop.group(3))
        if trips < 2 or _line_before(source, loop.start()).startswith("#pragma unroll"):
            continue
        body = source[loop.end():_closing(source, loop.end() - 1)]
        if BARRIER in body and _indexes_local_by_parity(body, var, local_arrays):
            inserts.append((loop.start(), indent))
    if not inserts:
        return source
    pieces, position = [], 0
    for start, indent in inserts:
        pieces += [source[position:start], f"{indent}{PRAGMA}\n"]
        position = start
    pieces.append(source[position:])
    return "".join(pieces)


def _accumulators_overflow(source: str) -> bool:
    """Whether a kernel with an unrolled parity loop has more fp32 array elements (its accumulators)
    than registers a thread may have (255, or what ``__launch_bounds__`` leaves of 65536): it keeps
    local memory whatever the loop does, so compiling it to find out is not worth it."""
    kernels = source.split(KERNEL_START)[1:]
    for kernel in kernels:
        if PRAGMA not in kernel:
            continue
        bounds = _LAUNCH_BOUNDS.search(kernel)
        cap = min(MAX_REGISTERS, REGISTERS_PER_BLOCK // int(bounds.group(1))) if bounds else MAX_REGISTERS
        if sum(int(n) for n in _FLOAT_ARRAY.findall(kernel)) > cap:
            return True
    return False


def unrolled_where_registers_hold(source: str, arch: str) -> str:
    """``unroll_parity_loops(source)`` where ptxas compiles it for ``arch`` without local memory (no
    stack frame, no spill) in any kernel, else ``source``; ``source`` where the switch is off. Costs
    one more compile, only for a source that has such a loop and whose accumulators could fit."""
    if not parity_loops_unrolled():
        return source
    unrolled = unroll_parity_loops(source)
    if unrolled == source:
        return source
    if _accumulators_overflow(unrolled):
        return source
    kernels = cuda_source_compile(unrolled, arch)[1]
    return unrolled if all(k.stack_bytes == 0 and not k.spills for k in kernels) else source
