"""What the machine code of measured tensor-core records looks like, next to their latency.

    python scripts/sass_mix.py --db work/<workload>/<run> [--db ...] [--geometry SUBSTRING] --out ...

For each valid record (of the kernel geometry whose name contains ``--geometry``, when given): the
CUDA the builder ships compiled with nvcc as TVM compiles it, ptxas's registers, and from the SASS
(``cuobjdump -sass``, which needs ``nvdisasm``; both come in the ``nvidia-cuda-cuobjdump`` and
``nvidia-cuda-nvdisasm`` wheels, found as the builder finds them or in ``--cuda-bin``) the opcode
counts of the main loop (the backward branch with the most MMA flops, ``builder.sass_issue.main_loop``),
the smallest distance in HMMA instructions between two that
write the same accumulator registers, and the write-back's global stores. Each record also has its
warp layout and per-warp fragment tile, read from MultiLevelTilingTensorCore's first two tile
decisions (``[block, block, warps, serial, inner]``). ``--min-blocks N`` compiles each kernel with
``__launch_bounds__(threads, N)``, to see what ptxas does with that hint. Summary: per (warps, fragments per warp), the
measured and estimated latencies. It asks whether the code tells apart records the analyzer ties
(docs/analyzer.md, section 3); no GPU is needed.

    python scripts/sass_mix.py --read FILE [--geometry SUBSTRING] [--target-us US]

prints an earlier ``--out`` file's records as a Markdown table by warp layout, fragments a warp,
fetch widths and how the warp's fragments are looped (``arrangement``), without compiling anything.
"""

import argparse
import collections
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import provenance, read_json, valid_records, write_json  # noqa: E402

_HMMA_DEST = re.compile(r"^\s*(R\d+),")


def compiled_kernel(source: str, target):
    """(the first kernel's SASS instructions (``builder.sass_issue.parse_sass``), ptxas's registers for
    it) of CUDA ``source`` compiled for ``target`` as the builder compiles it."""
    from ms_pruner.builder.ptxas import cuda_source_compile
    from ms_pruner.builder.sass import read_sass
    from ms_pruner.builder.sass_issue import parse_sass

    cubin, resources = cuda_source_compile(source, str(target.attrs["arch"]))
    return parse_sass(read_sass(cubin))[0], resources[0].registers


def hmma_min_distance(instructions: list):
    """Fewest HMMA instructions between two that write the same accumulator register (None: no
    repeated accumulator): how closely the compiler packed dependent tensor-core operations."""
    last, best = {}, None
    hmmas = [i.operands for i in instructions if i.family == "HMMA"]
    for position, operands in enumerate(hmmas):
        dest = _HMMA_DEST.match(operands)
        if dest:
            if dest.group(1) in last:
                gap = position - last[dest.group(1)]
                best = gap if best is None else min(best, gap)
            last[dest.group(1)] = position
    return best


def warp_tile(trace) -> dict:
    from ms_pruner.search import tile_decisions

    tiles = tile_decisions(trace)
    if len(tiles) < 2 or len(tiles[0]) != 5 or len(tiles[1]) != 5:
        return {}
    m, n = tiles[0], tiles[1]
    return {"warps": f"{m[2]}x{n[2]}", "fragments_per_warp": f"{m[3] * m[4]}x{n[3] * n[4]}",
            "inner_fragments": f"{m[4]}x{n[4]}", "tiles": [list(t) for t in tiles]}


def arrangement(tiles: list) -> str:
    """How a warp's fragments are split between the serial loop outside the innermost reduction and
    the inner loop under it, per spatial dimension (``i SxI, j SxI``): arrangements of one warp tile
    that the analyzer estimates alike, told apart from ``tiles`` (``warp_tile``'s)."""
    from ms_pruner.search.first_round.arrangement import arrangement_name

    return arrangement_name(((tiles[0][3], tiles[0][4]), (tiles[1][3], tiles[1][4])))


def arrangement_table(rows: list, geometry: str = "", target_us: float = 0.0) -> str:
    """Markdown: the records of geometries containing ``geometry`` by (warp layout, fragments a warp,
    A/B fetch bytes, arrangement), with their measured latencies, how many are at or below
    ``target_us`` (when given) and ptxas's registers; fetch widths first, so that arrangements of one
    fetch variant sit together."""
    groups = collections.defaultdict(list)
    for row in rows:
        if geometry in row["geometry"] and row.get("tiles"):
            key = (row["geometry"], row["warps"], row["fragments_per_warp"], tuple(row["fetch_bytes"]),
                   arrangement(row["tiles"]))
            groups[key].append(row)
    head = "| geometry | warps | fragments a warp | A/B fetch bytes | arrangement | records | best / median us |"
    head += f" at or below {target_us:g} us |" if target_us else ""
    lines = [head + " ptxas registers |", "|" + " --- |" * head.count("|")]
    for key in sorted(groups):
        measured = sorted(r["measured_us"] for r in groups[key])
        registers = sorted({r["registers"] for r in groups[key]})
        cells = [key[0], key[1], key[2], "/".join(map(str, key[3])), key[4], str(len(measured)),
                 f"{measured[0]:.1f} / {statistics.median(measured):.1f}"]
        if target_us:
            cells.append(str(sum(us <= target_us for us in measured)))
        cells.append(f"{registers[0]}-{registers[-1]}" if len(registers) > 1 else str(registers[0]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def with_min_blocks(source: str, min_blocks: int) -> str:
    """``source`` with each ``__launch_bounds__(threads)`` given a minimum of resident blocks per SM,
    the hint that lets ptxas plan its registers for that many blocks instead of its own guess."""
    if not min_blocks:
        return source
    return re.sub(r"__launch_bounds__\((\d+)\)", rf"__launch_bounds__(\1, {min_blocks})", source)


def describe(record, sch, measured: float, estimate, min_blocks: int = 0) -> dict:
    from ms_pruner.analysis import geometry_name, kernel_geometry, operand_fetch_bytes
    from ms_pruner.analysis.issue_bound import issue_latencies
    from ms_pruner.builder.sass_issue import loop_issue, main_loop
    from ms_pruner.builder.worker import cuda_sources
    from ms_pruner.hardware import spec_for_target

    source = with_min_blocks(cuda_sources(sch.mod, record.target)[0], min_blocks)
    instructions, registers = compiled_kernel(source, record.target)
    loop = main_loop(instructions) or []
    stores = collections.Counter(i.opcode for i in instructions if i.family == "STG")
    issue = loop_issue(loop, *issue_latencies(spec_for_target(record.target))) if loop else None
    return {"measured_us": measured * 1e6, "estimate_us": estimate.latency_s * 1e6,
            # A lone warp's main-loop trip and its waits on loads (docs/compiled.md, the issue floor).
            "warp_trip_cycles": issue.trip_cycles if issue else None,
            "warp_trip_wait_cycles": issue.wait_cycles if issue else None,
            "geometry": geometry_name(kernel_geometry(estimate.features)),
            "fetch_bytes": list(operand_fetch_bytes(estimate.features)), **warp_tile(record.trace),
            "registers": registers, "registers_estimate": estimate.features[0].regs_per_thread,
            "main_loop_instructions": len(loop),
            "main_loop_opcodes": dict(collections.Counter(i.family for i in loop).most_common()),
            "hmma_min_distance": hmma_min_distance(loop), "global_stores": dict(stores)}


def summarize(rows: list) -> list:
    groups = collections.defaultdict(list)
    for row in rows:
        groups[row["geometry"], row.get("warps"), row.get("fragments_per_warp")].append(row)
    out = []
    for (geometry, warps, fragments), members in groups.items():
        measured = sorted(r["measured_us"] for r in members)
        out.append({"geometry": geometry, "warps": warps, "fragments_per_warp": fragments, "records": len(members),
                    "measured_us": [measured[0], statistics.median(measured), measured[-1]],
                    "estimate_us": [min(r["estimate_us"] for r in members), max(r["estimate_us"] for r in members)],
                    "registers": sorted({r["registers"] for r in members}),
                    "main_loop_instructions": sorted({r["main_loop_instructions"] for r in members}),
                    "hmma_min_distance": sorted({r["hmma_min_distance"] for r in members}, key=str)})
    return sorted(out, key=lambda g: g["measured_us"][1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", action="append", default=[], help="a run's work dir (a JSON database)")
    parser.add_argument("--geometry", default="", help="only records whose kernel geometry name contains this")
    parser.add_argument("--cuda-bin", default="", help="folder with cuobjdump and nvdisasm, if not on PATH")
    parser.add_argument("--min-blocks", type=int, default=0,
                        help="compile with __launch_bounds__(threads, N) instead of TVM's __launch_bounds__(threads)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--read", default=None,
                        help="print an earlier --out file's records by warp arrangement (arrangement_table) and stop")
    parser.add_argument("--target-us", type=float, default=0.0,
                        help="with --read: count the records at or below this latency")
    args = parser.parse_args()
    if args.read:
        sys.stdout.write(arrangement_table(read_json(args.read)["rows"], args.geometry, args.target_us))
        return
    if not args.db or not args.out:
        parser.error("--db and --out are required unless --read is given")
    if args.cuda_bin:
        os.environ["PATH"] = os.pathsep.join((args.cuda_bin, os.environ.get("PATH", "")))

    from ms_pruner.analysis import StaticAnalyzer, geometry_name, kernel_geometry
    from ms_pruner.database import replay_record

    rows = []
    for path in args.db:
        for index, record, measured in valid_records(path):
            sch = replay_record(record)
            estimate = StaticAnalyzer.for_target(record.target).estimate(sch)
            if args.geometry in geometry_name(kernel_geometry(estimate.features)):
                row = describe(record, sch, measured, estimate, args.min_blocks)
                rows.append(dict(row, db=os.path.normpath(path), record=index))
    summary = summarize(rows)
    for group in summary:
        print(group)
    write_json(args.out, {**provenance(), "summary": summary, "rows": rows})


if __name__ == "__main__":
    main()
