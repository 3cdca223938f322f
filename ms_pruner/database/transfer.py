"""Transfer-tuning: the best records of other workloads of one operator kind, adapted to new shapes.

MetaSchedule reuses a record only for the very same workload (structural hash). A schedule tuned
for one GEMM or convolution is a good start for another of the same kind and other shapes (Gibson &
Cano, PACT'22): its trace replays on the new workload once each tile split is re-factored to the
new loop extents; the other decisions (unroll depths, vector widths, compute locations) are kept,
and a trace that no longer applies or fails the postprocessors is dropped. A trace whose layout
transforms are written for its own shapes (a tensor-core conv2d's im2col index maps) is first moved
onto the new workload's sketch that was built the same way (``on_new_sketch``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Callable, List, Optional, Sequence, Tuple

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Trace

from ..errors import UserError
from .records import database_paths, group_by_workload, is_valid, mean_latency, open_database, structural_key

SHAPE_BOUND = ("TransformLayout", "TransformBlockLayout")  # their index maps name the tuned extents


def operator_signature(mod) -> Tuple:
    """A workload's operator kind, whatever its shapes: each block's name, iteration kinds (spatial,
    reduction) and which iteration variables index each dimension of what it reads and writes (a
    matmul's B[k, j] is not matmul_nt's B[j, k]), and the parameters' dtypes. Tasks of one kind and
    other shapes share it, so their traces name the same blocks and loops."""
    if not isinstance(mod, tvm.IRModule):
        mod = tvm.IRModule({"main": mod})
    func = next(iter(mod.functions.values()))
    sch = Schedule(mod)
    blocks = tuple(_block_signature(sch.get(b)) for b in sch.get_child_blocks(sch.get_sblock("root")))
    return blocks, tuple(str(getattr(p, "dtype", "")) for p in func.params)


def _block_signature(block) -> Tuple:
    names = [str(v.var.name) for v in block.iter_vars]
    kinds = "".join("SR"[int(v.iter_type) == 2] for v in block.iter_vars)

    def uses(expr) -> Tuple[int, ...]:
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(expr)))
        return tuple(i for i, name in enumerate(names) if name in words)

    access = tuple(tuple(uses(dim.min) for dim in region.region) for region in list(block.reads) + list(block.writes))
    return str(block.name_hint), kinds, access


def refactor(factors: Sequence[int], extent: int, max_innermost: int = 0) -> List[int]:
    """``factors`` re-factored to multiply to ``extent``: from the innermost out, each the largest
    divisor of what is left that is no larger than the old factor (the innermost also within
    ``max_innermost`` where that is set), the outermost taking the rest. Always a valid split."""
    left, inner = int(extent), []
    for position, old in enumerate(reversed(list(factors)[1:])):
        cap = max(1, int(old))
        if position == 0 and max_innermost > 0:
            cap = min(cap, int(max_innermost))
        factor = max(d for d in range(1, min(cap, left) + 1) if left % d == 0)
        inner.append(factor)
        left //= factor
    return [left] + inner[::-1]


def adapting_provider(sch) -> Callable:
    """A ``decision_provider`` for replaying a trace on ``sch``: each tile split's decision
    re-factored to the extent of the loop it splits in ``sch`` (``refactor``), the rest kept."""
    def provide(inst, inputs, attrs, decision):
        if inst.kind.name == "SamplePerfectTile" and decision is not None:
            extent = int(sch.get(inputs[0]).extent)
            return [int(f) for f in refactor([int(d) for d in decision], extent, int(attrs[1]))]
        return decision

    return provide


def construction(trace) -> List[Tuple[str, str]]:
    """Each instruction's kind and attributes, the shape-bound index maps left out."""
    return [(inst.kind.name, "" if inst.kind.name in SHAPE_BOUND else str(inst.attrs)) for inst in trace.insts]


def on_new_sketch(trace, sketches):
    """``trace``'s decisions on the one of ``sketches`` (the new workload's) built the same way: the
    same instructions with the same attributes, layout transforms aside, which the sketch writes for
    the new shapes. ``trace`` itself where no sketch is built so (it may still replay)."""
    source = trace.simplified(remove_postproc=True)
    built = construction(source)
    sketch = next((s for s in sketches if construction(s) == built), None)
    return trace if sketch is None else on_sketch(source, sketch)


def on_sketch(source, sketch, adapt: Optional[Callable] = None):
    """``source``'s decisions on ``sketch``, built as ``source`` was (``construction``), instruction
    by instruction; ``adapt(inst, decision)`` may rewrite a decision of ``source`` or refuse it
    (None: no trace)."""
    decisions = {}
    for old, new in zip(source.insts, sketch.insts):
        if old in source.decisions:
            decision = source.decisions[old] if adapt is None else adapt(old, source.decisions[old])
            if decision is None:
                return None
            decisions[new] = decision
    return Trace(sketch.insts, decisions)


def same_kind_of_target(left, right) -> bool:
    """Same target kind and, for a GPU, the same architecture (a space's shared-memory opt-in and
    the host's core count do not matter to a schedule)."""
    return left.kind.name == right.kind.name and str(left.attrs.get("arch", "")) == str(right.attrs.get("arch", ""))


@dataclasses.dataclass
class SourceRecord:
    """A record of another workload that a warm start adapts: where from (``WORK_DIR#RANK of
    WORKLOAD``, its rank among that workload's records there), and its latency."""

    trace: object
    source: str
    latency_s: float


def tuned_records(path: str) -> list:
    """The valid records of the database at ``path`` (a missing or corrupt one is one UserError
    line), read once a version of its record file: parsing costs ~14 ms a tensor-core record, and the
    check before tuning, ``require_sources`` and every task's warm start read the same sources."""
    record_file = database_paths(path)[1]
    if not os.path.isfile(record_file):
        open_database(path)  # names what is missing
    stat = os.stat(record_file)
    return _read_valid_records(os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _read_valid_records(path: str, _mtime_ns: int, _size: int) -> tuple:
    return tuple(r for r in open_database(path).get_all_tuning_records() if is_valid(r))


def workload_name(mod) -> str:
    """A workload as a user reads it: its blocks, and its parameters' shapes and dtypes."""
    func = next(iter(mod.functions.values()))
    params = ", ".join(f"{'x'.join(str(int(d)) for d in p.shape)}:{p.dtype}" for p in func.params)
    blocks = "+".join(name for name, _, _ in operator_signature(mod)[0])
    return f"{blocks}({params})"


def source_records(paths: Sequence[str], mod, target, per_workload: int = 8) -> List[SourceRecord]:
    """The ``per_workload`` fastest valid records of each other workload in the databases at
    ``paths`` that has ``mod``'s operator kind and was tuned for ``target``'s kind of target, best
    first. Records of ``mod`` itself are left out (MetaSchedule reuses those already)."""
    wanted, own = operator_signature(mod), structural_key(mod)
    found: List[SourceRecord] = []
    for path in paths:
        usable = [r for r in tuned_records(path) if same_kind_of_target(r.target, target)]
        for key, records in group_by_workload(usable).items():
            if key == own or operator_signature(records[0].workload.mod) != wanted:
                continue
            records.sort(key=mean_latency)
            name = workload_name(records[0].workload.mod)
            found += [SourceRecord(r.trace, f"{path}#{i} of {name}", mean_latency(r))
                      for i, r in enumerate(records[:per_workload])]
    return sorted(found, key=lambda s: s.latency_s)


def require_sources(paths: Sequence[str], mods: Sequence, target) -> None:
    """One line, before tuning, when no workload of ``mods`` (a workload, or a model's tasks) has a
    record of its operator kind for this kind of target in ``paths``; a task without one starts cold."""
    if paths and not any(source_records(paths, mod, target, per_workload=1) for mod in mods):
        raise UserError(f"--warm-start: no record of this operator kind for this target in {', '.join(paths)}")
