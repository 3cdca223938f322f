"""Ordering a cold round's analyzer ties by what ptxas allots them.

The analyzer estimates the favourite matmul geometry's 36 arrangement and wide fetch-width ties
within 1%; ptxas gives 8 of those arrangements 242-255 registers a thread at every fetch width and
one arrangement (``i 1x4, j 2x2``) 216-239 at one or two widths. On the H100 those low cells were the
fastest kernels of 512 measured (422.0 and 430.2 us against a median of ~449 for the ties;
docs/search.md, the first-round policy). The register count is known without a GPU, from
the compile the builder makes anyway (~1 s a candidate with nvcc), so a cold round compiles its
favourite geometry's first tied members and measures first those ptxas allots clearly fewer
registers than the ties' median, alternating with the others in their turns.
"""

from __future__ import annotations

import shutil
import statistics
from typing import Callable, Hashable, List, Optional, Tuple

from ...builder.resources import cuda_source_resources, reporting_cuda_compile
from ...builder.worker import cuda_sources
from ...threads import map_on_threads

# Registers under the ties' median a member must be to go first: the matmul's low cells are 8-30
# under it (one at 239, 5 under, is not taken); the conv2d layer's ties (146-205 registers in the H100
# records) put 0-6 of a cold round's there.
REGISTER_MARGIN = 8


def can_compile(target) -> bool:
    """Whether ptxas's report can be had for ``target`` here: a CUDA target and nvcc on PATH."""
    return target.kind.name == "cuda" and shutil.which("nvcc") is not None


def first_kernel_resources(mods: List, target, threads: int) -> List[Optional[object]]:
    """ptxas's report (``builder.KernelResources``) of each scheduled IRModule's first kernel, or
    None where it does not lower or compile. Lowered as the builder lowers, on ``threads`` threads;
    where code generation compiles by itself (a GPU machine) that compile gives the report, else
    the source is compiled here."""
    arch, reports = str(target.arch), {}

    def one(mod):
        try:
            sources = cuda_sources(mod, target, use_nvcc=False)
            if not sources:
                return None
            kernels = reports.get(sources[0]) or cuda_source_resources(sources[0], arch)
            return kernels[0] if kernels else None
        except Exception:  # pylint: disable=broad-except
            return None

    with reporting_cuda_compile(arch, reports):
        return map_on_threads(one, mods, threads=threads)


def fewer_registers_first(registers: List[Optional[int]], spills: List[bool],
                          margin: int = REGISTER_MARGIN) -> Tuple[List[int], int]:
    """(indices of ``registers`` (members in their turn order) reordered, how many went first): those
    at least ``margin`` under the median of the known counts and not spilling, fewest first,
    alternate with the others in their order, a low one first; so at most about half of a
    geometry's picks follow the register count and the rest keep the turns."""
    known = [r for r in registers if r is not None]
    if len(known) < 2:
        return list(range(len(registers))), 0
    threshold = statistics.median(known) - margin
    low = sorted((i for i, r in enumerate(registers) if r is not None and r <= threshold and not spills[i]),
                 key=lambda i: (registers[i], i))
    promoted = set(low)
    rest = [i for i in range(len(registers)) if i not in promoted]
    order = []
    for pair in zip(low, rest):
        order.extend(pair)
    return order + low[len(rest):] + rest[len(low):], len(low)


def order_ties_by_registers(ranked: List, group: Callable, latency: Callable, band: float, count: int,
                            resources_of: Callable) -> Tuple[List, int]:
    """(``ranked`` with the first ``count`` members of the first member's group that are estimated
    within ``band`` of its best (the favourite geometry's ties, in their turn order) reordered by
    ``fewer_registers_first``, in the positions they held; how many of them went first).
    ``resources_of(members)`` gives each one's ptxas report (``first_kernel_resources``) or None."""
    if not ranked or count <= 0:
        return ranked, 0
    favourite: Hashable = group(ranked[0])
    members = [(position, item) for position, item in enumerate(ranked) if group(item) == favourite]
    best = min(latency(item) for _, item in members)
    tied = [(position, item) for position, item in members if latency(item) <= best * (1.0 + band)][:count]
    reports = resources_of([item for _, item in tied])
    registers = [report.registers if report is not None else None for report in reports]
    spills = [bool(report is not None and report.spills) for report in reports]
    order, promoted = fewer_registers_first(registers, spills)
    reordered = list(ranked)
    for (position, _), index in zip(tied, order):
        reordered[position] = tied[index][1]
    return reordered, promoted
