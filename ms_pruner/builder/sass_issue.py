"""How long one warp takes to issue a compiled kernel's main loop, read from its SASS.

The analyzer sees the TIR; ptxas decides the order the instructions issue in. Where it keeps few
operand fragments live (fewer registers than the TIR asks for), it loads each fragment just
before its MMAs, and a warp waits a shared-memory round trip every few MMAs: the H100 matmul
records whose 128 x 32 warp tiles measured 606-852 us against 422-476 us for the same geometry's
other arrangements (docs/analyzer.md) are such kernels, estimated within 10% of the others.

Every SASS instruction carries its scheduling in a control word (the second 64-bit half, bits
41-63 of its high word on Volta and later): a stall count, the scoreboard a variable-latency
instruction sets when its result is written, and a mask of the scoreboards it waits on. Issuing
the main loop in order with those waits, each scoreboard released a load's latency after its
producer issued, gives a warp's cycles per trip alone on its sub-partition: a floor no other
warp can lower for it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional

from .ptxas import cuda_source_compile
from .sass import _SASS_LINE, cuda_bin_dir, read_sass

_CONTROL_WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
_BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")
_HMMA_SHAPE = re.compile(r"HMMA\.(16)(8)(8|16)\b")  # m16n8k8, m16n8k16
NO_SCOREBOARD = 7
SIMULATED_TRIPS = 3  # the first trip starts with nothing in flight; the mean over three settles


@dataclasses.dataclass(frozen=True)
class SassInstruction:
    address: int
    opcode: str
    operands: str
    stall: int  # cycles before the next instruction may issue
    write_scoreboard: int  # set until this instruction's result is written (7: none)
    read_scoreboard: int  # set until its source registers are read (7: none)
    wait_mask: int  # scoreboards to wait for before issuing

    @property
    def family(self) -> str:
        return self.opcode.split(".")[0]


@dataclasses.dataclass(frozen=True)
class LoopIssue:
    """One warp alone issuing a kernel's main loop (the backward branch with the most MMAs)."""

    instructions: int
    mma_flops: float  # the MMA flops of one trip of the SASS loop, a warp's
    trip_cycles: float
    stall_cycles: float  # the trip at its stall counts alone: no scoreboard ever waited on

    def cycles_per_flop(self) -> float:
        return self.trip_cycles / self.mma_flops

    @property
    def wait_cycles(self) -> float:
        """Cycles a trip waits on loads (fragments loaded just before their MMAs) beyond its stalls."""
        return self.trip_cycles - self.stall_cycles


def parse_sass(listing: str) -> List[List[SassInstruction]]:
    """Each kernel's instructions of a ``cuobjdump -sass`` listing, with their control words."""
    kernels: List[List[SassInstruction]] = []
    lines = listing.splitlines()
    for k, line in enumerate(lines):
        if line.lstrip().startswith("Function :"):
            kernels.append([])
            continue
        match = _SASS_LINE.match(line)
        control = _CONTROL_WORD.match(lines[k + 1]) if match and k + 1 < len(lines) else None
        if not match or control is None:
            continue
        if not kernels:
            kernels.append([])
        high = int(control.group(1), 16)
        kernels[-1].append(SassInstruction(
            address=int(match.group(1), 16), opcode=match.group(2), operands=match.group(3),
            stall=(high >> 41) & 0xF, write_scoreboard=(high >> 46) & 0x7, read_scoreboard=(high >> 49) & 0x7,
            wait_mask=(high >> 52) & 0x3F))
    return kernels


def hmma_flops(opcode: str) -> float:
    """Flops of one warp's HMMA (``HMMA.16816.F32``: m16 n8 k16, 2 x 16 x 8 x 16)."""
    shape = _HMMA_SHAPE.match(opcode)
    if not shape:
        return 0.0
    return 2.0 * int(shape.group(1)) * int(shape.group(2)) * int(shape.group(3))


def main_loop(kernel: List[SassInstruction]) -> Optional[List[SassInstruction]]:
    """The body of the backward branch whose body issues the most MMA flops, or None."""
    best, best_flops = None, 0.0
    for branch in kernel:
        if branch.family != "BRA":
            continue
        target = _BRANCH_TARGET.search(branch.operands)
        if not target or int(target.group(1), 16) >= branch.address:
            continue
        start = int(target.group(1), 16)
        body = [i for i in kernel if start <= i.address <= branch.address]
        flops = sum(hmma_flops(i.opcode) for i in body)
        if flops > best_flops:
            best, best_flops = body, flops
    return best


def warp_trip_cycles(body: List[SassInstruction], latencies: Dict[str, float], default_latency: float,
                     trips: int = SIMULATED_TRIPS) -> float:
    """Mean cycles a lone warp takes to issue ``body`` once: in order, each instruction after its
    predecessor's stall count and once the scoreboards it waits on are released; a scoreboard is
    released ``latencies[family]`` cycles after the instruction that set it issued."""
    clock, released = 0.0, [0.0] * 6
    for _ in range(trips):
        for ins in body:
            waits = [released[b] for b in range(6) if ins.wait_mask >> b & 1]
            clock = max([clock] + waits)
            if ins.write_scoreboard != NO_SCOREBOARD:
                released[ins.write_scoreboard] = clock + latencies.get(ins.family, default_latency)
            if ins.read_scoreboard != NO_SCOREBOARD:
                released[ins.read_scoreboard] = max(released[ins.read_scoreboard], clock + default_latency)
            clock += max(1, ins.stall)
    return clock / trips


def loop_issue(body: List[SassInstruction], latencies: Dict[str, float], default_latency: float) -> LoopIssue:
    """A main loop's ``body`` (``main_loop``) issued by one warp alone."""
    return LoopIssue(instructions=len(body), mma_flops=sum(hmma_flops(i.opcode) for i in body),
                     trip_cycles=warp_trip_cycles(body, latencies, default_latency),
                     stall_cycles=float(sum(max(1, i.stall) for i in body)))


def main_loop_issue(listing: str, latencies: Dict[str, float], default_latency: float) -> List[Optional[LoopIssue]]:
    """``LoopIssue`` of each kernel of a listing (None for a kernel with no MMA loop), launch order."""
    bodies = (main_loop(kernel) for kernel in parse_sass(listing))
    return [None if body is None else loop_issue(body, latencies, default_latency) for body in bodies]


def source_loop_issues(sources: List[str], arch: str, latencies: Dict[str, float], default_latency: float
                       ) -> Optional[List[Optional[LoopIssue]]]:
    """``main_loop_issue`` of every kernel of CUDA ``sources`` compiled for ``arch`` as the builder
    compiles them (the compile is shared with ptxas's report), or None where no SASS reader is
    installed (``sass.cuda_bin_dir``)."""
    if cuda_bin_dir() is None:
        return None
    issues: List[Optional[LoopIssue]] = []
    for source in sources:
        cubin, _ = cuda_source_compile(source, arch)
        issues.extend(main_loop_issue(read_sass(cubin), latencies, default_latency))
    return issues
