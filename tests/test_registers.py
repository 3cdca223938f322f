"""ptxas's register report and the analyzer's register estimate held against it."""

import os

import pytest

from conftest import H100_MM4096, REPO_ROOT, needs_h100_data, needs_nvcc, workload_space
from ms_pruner.analysis import StaticAnalyzer, check_registers, summarize_register_checks
from ms_pruner.builder import KernelResources, candidate_resources, cuda_source_resources, parse_ptxas_report
from ms_pruner.hardware import GPUSpec

# nvcc 13.0's report for tests/data/ptxas/two_kernels.cu (sm_90, TVM's ptxas flags), with a device
# function's properties, which are not an entry function, in between.
REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'staged' for 'sm_90'
ptxas info    : Function properties for staged
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 1.965 ms
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'squeezed' for 'sm_90'
ptxas info    : Function properties for squeezed
    608 bytes stack frame, 644 bytes spill stores, 692 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 608 bytes cumulative stack size
ptxas info    : Compile time = 33.407 ms
"""
TWO_KERNELS = os.path.join(REPO_ROOT, "tests", "data", "ptxas", "two_kernels.cu")


def test_ptxas_report_is_read_entry_by_entry():
    staged, squeezed = parse_ptxas_report(REPORT)
    assert staged == KernelResources("staged", registers=14, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0,
                                     static_smem_bytes=1024)
    assert not staged.spills
    assert (squeezed.name, squeezed.registers, squeezed.stack_bytes) == ("squeezed", 32, 608)
    assert (squeezed.spill_store_bytes, squeezed.spill_load_bytes, squeezed.spills) == (644, 692, True)
    with pytest.raises(ValueError, match="'squeezed' has no register count"):
        parse_ptxas_report(REPORT.split("ptxas info    : Used 32")[0])


@needs_nvcc
def test_nvcc_reports_spills_under_launch_bounds():
    """__launch_bounds__(1024, 2) leaves 32 registers a thread: 64 live floats spill."""
    with open(TWO_KERNELS) as f:
        kernels = {k.name: k for k in cuda_source_resources(f.read(), "sm_90")}
    assert set(kernels) == {"staged", "squeezed"}
    assert kernels["staged"].static_smem_bytes == 256 * 4 and not kernels["staged"].spills
    assert kernels["squeezed"].registers <= 32 and kernels["squeezed"].spills
    with pytest.raises(RuntimeError, match="nvcc failed for sm_90"):
        cuda_source_resources("this is not CUDA", "sm_90")


@needs_nvcc
def test_sampled_tensor_core_candidates_against_ptxas(tensor_intrinsics):
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    spec = GPUSpec.h100()
    target = spec.target()
    schedules = DesignSpace(parse_workload("matmul:4096x4096x4096:float16:float32").prim_func(), target).sample(
        6, seed=3)
    analyzer = StaticAnalyzer.for_target(target)
    checks = []
    for sch in schedules:
        resources = candidate_resources(sch.mod, target)
        assert len(resources) == 1 and 16 <= resources[0].registers <= spec.max_regs_per_thread
        paired = check_registers(analyzer.estimate(sch), resources, spec)
        assert len(paired) == 1
        checks.append(paired[0])
    for check in checks:
        assert check.blocks_per_sm_ptxas >= 1
        if not check.spill_ptxas:  # the register limit the occupancy rule assumes holds
            assert check.regs_ptxas * check.blocks_per_sm_ptxas <= spec.regs_per_sm
    summary = summarize_register_checks(checks + [None])
    assert summary["kernels"] == 6
    assert summary["spill_both"] + summary["spill_neither"] + summary["spill_estimate_only"] \
        + summary["spill_ptxas_only"] == 6
    with pytest.raises(ValueError, match="needs a CUDA target"):
        from tvm.target import Target

        candidate_resources(schedules[0].mod, Target("llvm"))


@needs_nvcc
def test_a_pipelined_loop_nvcc_unrolls_whole_keeps_one_copy_of_its_fragments(tensor_intrinsics, monkeypatch):
    """A 4-stage mma pipeline over 2 k tiles (matmul:256x256x128) is straight-line code: ptxas moves
    each stage's ldmatrix next to its MMAs, keeps no second fragment copy and does not spill. The
    analyzer says so; with its unrolled-loop term off it charges both copies and takes the copy
    to be chosen at run time, in local memory."""
    from ms_pruner.analysis.gpu_model import uses_local_memory
    from ms_pruner.analysis.pipeline import UNROLLED_TRIPS_ENV

    spec = GPUSpec.h100()
    _, target, space = workload_space("matmul:256x256x128:float16:float32", "mma")
    sch = space.sample(2, seed=0)[1]
    (resources,) = candidate_resources(sch.mod, target)
    analyzer = StaticAnalyzer.for_target(target)
    (unrolled,) = analyzer.estimate(sch).features
    monkeypatch.setenv(UNROLLED_TRIPS_ENV, "0")
    (looped,) = analyzer.estimate(sch).features
    assert unrolled.pipeline_stages > 1 and unrolled.main_loop_trips == 2
    assert not resources.spills and resources.stack_bytes == 0
    assert not uses_local_memory(unrolled, spec) and uses_local_memory(looped, spec)
    assert resources.registers < unrolled.regs_per_thread < looped.regs_per_thread


def test_a_trip_limit_that_is_not_a_number_is_one_clear_line(monkeypatch):
    from ms_pruner.analysis.pipeline import UNROLLED_TRIPS_ENV, unrolled_whole
    from ms_pruner.errors import UserError

    monkeypatch.setenv(UNROLLED_TRIPS_ENV, "eight")
    with pytest.raises(UserError, match=f"{UNROLLED_TRIPS_ENV} must be a whole number of trips.*'eight'"):
        unrolled_whole(2)
    monkeypatch.setenv(UNROLLED_TRIPS_ENV, "2")
    assert unrolled_whole(2) and not unrolled_whole(3)


@needs_nvcc
@needs_h100_data
@pytest.mark.slow
def test_analyzer_spill_calls_match_ptxas_on_h100_records(tensor_intrinsics):
    """The measured best (252-254 registers by ptxas, 2 blocks an SM) and the records whose
    estimates need the most registers (128 accumulator fragments a warp: every one spills)."""
    from ms_pruner.database import replay_record
    from ms_pruner.evaluation.database_report import RecordEstimate, register_summary
    from ms_pruner.database.records import mean_latency, records_in_file_order

    records = records_in_file_order(H100_MM4096)
    analyzer = StaticAnalyzer.for_target(records[0].target)
    estimates = [analyzer.estimate(replay_record(r).mod) for r in records]
    best = min(range(len(records)), key=lambda i: mean_latency(records[i]))
    heaviest = sorted(range(len(records)), key=lambda i: -estimates[i].features[0].regs_per_thread)[:2]
    rows = []
    for index in [best, *heaviest]:
        checks = check_registers(estimates[index], candidate_resources(replay_record(records[index]).mod,
                                                                       records[index].target), analyzer.hardware)
        rows.append(RecordEstimate(estimates[index].latency_s, mean_latency(records[index]), True, "",
                                   registers=checks))
    best_check = rows[0].registers[0]
    assert 240 <= best_check.regs_ptxas <= 255 and not best_check.spill_ptxas and not best_check.spill_estimate
    assert best_check.blocks_per_sm_estimate == best_check.blocks_per_sm_ptxas == 2
    for row in rows[1:]:
        assert row.registers[0].spill_estimate and row.registers[0].spill_ptxas and row.registers[0].stack_bytes > 0
    summary = register_summary(rows)
    assert (summary["spill_both"], summary["spill_neither"], summary["records_without_report"]) == (2, 1, 0)
    # The analyzer's spill model underprices these: measured 5-11x its estimate, against 1.15 for the best.
    assert summary["measured_over_estimate_median"]["spilling"] > 3.0
    assert summary["measured_over_estimate_median"]["not_spilling"] < 1.3


def test_ptxas_needs_cuda_records(capsys):
    from ms_pruner.cli import main

    cpu_db = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32")
    assert main(["analyze", "--db", cpu_db, "--ptxas"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ms-pruner: error: ptxas reports need CUDA records; this database's target is llvm"


# Lines of a real listing (cuobjdump -sass of an H100 matmul record, nvcc 13.0), cut down: a
# prologue, a loop whose HMMAs write R4 twice two apart, its backward branch, and the exit's
# self-branch, which is not a loop.
SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                     /* 0x00000a00ff017b82 */
                                                                                      /* 0x000fc00000000000 */
        /*05f0*/                   LDSM.16.M88.4 R140, [R143+0x2200] ;                        /* 0x002200008f8c783b */
                                                                                      /* 0x000fc00000000000 */
        /*0a20*/                   HMMA.16816.F32 R112, R140.reuse, R120, R112 ;          /* 0x000000788c70723c */
                                                                                      /* 0x000fc00000000000 */
        /*0a30*/                   HMMA.16816.F32 R4, R140.reuse, R122, R4 ;              /* 0x0000007a8c04723c */
                                                                                      /* 0x000fc00000000000 */
        /*0a40*/                   HMMA.16816.F32 R8, R140.reuse, R116, R8 ;              /* 0x000000748c08723c */
                                                                                      /* 0x000fc00000000000 */
        /*0a50*/                   HMMA.16816.F32 R4, R140, R118, R4 ;                    /* 0x000000768c0c723c */
                                                                                      /* 0x000fc00000000000 */
        /*18c0*/               @P0 BRA 0x5f0 ;                                            /* 0xffffffec00480947 */
                                                                                      /* 0x000fc00000000000 */
        /*1900*/                   STG.E.128 desc[UR4][R2.64], R8 ;                           /* 0x0000000802007986 */
                                                                                      /* 0x000fc00000000000 */
        /*2370*/                   EXIT ;                                                     /* 0x000000000000794d */
                                                                                      /* 0x000fc00000000000 */
        /*2380*/                   BRA 0x2380;                                                /* 0xfffffffc00fc7947 */
                                                                                      /* 0x000fc00000000000 */
"""


def test_sass_mix_reads_the_main_loop_and_its_dependent_hmmas():
    """scripts/sass_mix.py reads the main loop as the package does (the backward branch with the
    most MMA flops: the predicated one here; the exit's self-branch is not a loop), and the closest
    two HMMAs writing the same accumulator are two apart; ``--min-blocks`` adds its hint to every
    launch bound."""
    import sys

    from ms_pruner.builder.sass_issue import main_loop, parse_sass

    sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
    from sass_mix import hmma_min_distance, with_min_blocks

    (instructions,) = parse_sass(SASS)
    assert [i.opcode for i in instructions][:2] == ["LDC", "LDSM.16.M88.4"] and len(instructions) == 10
    loop = main_loop(instructions)
    assert [i.family for i in loop] == ["LDSM", "HMMA", "HMMA", "HMMA", "HMMA", "BRA"]
    assert hmma_min_distance(loop) == 2
    assert hmma_min_distance(loop[:3]) is None
    header = 'extern "C" __global__ void __launch_bounds__(128) main_kernel(half* __restrict__ A_ptr'
    assert with_min_blocks(header, 2) == header.replace("__launch_bounds__(128)", "__launch_bounds__(128, 2)")
    assert with_min_blocks(header, 0) == header


def test_sass_mix_tables_records_by_how_a_warp_loops_its_fragments():
    """``sass_mix.py --read``: records of one warp tile and fetch variant are told apart by how the
    tile's last two levels split the fragments (``i 1x4, j 2x2``), counted against the target."""
    import sys

    sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
    from sass_mix import arrangement, arrangement_table

    def row(us, tiles, registers, fetch=(16, 8), geometry="grid 1024 x 128 thr"):
        return {"geometry": geometry, "warps": "2x2", "fragments_per_warp": "4x4", "fetch_bytes": list(fetch),
                "tiles": tiles, "measured_us": us, "registers": registers}

    fast, plain = [[8, 4, 2, 1, 4], [8, 4, 2, 2, 2], [64, 1, 4]], [[8, 4, 2, 1, 4], [8, 4, 2, 1, 4], [64, 1, 4]]
    assert arrangement(fast) == "i 1x4, j 2x2" and arrangement(plain) == "i 1x4, j 1x4"
    rows = [row(422.0, fast, 230), row(443.6, plain, 244), row(449.0, plain, 246),
            row(500.0, plain, 255, geometry="grid 2048 x 64 thr")]
    table = arrangement_table(rows, "1024 x 128", 442.1).splitlines()
    assert table[0].count("|") == table[1].count("|") == 10 and "at or below 442.1 us" in table[0]
    assert len(table) == 4
    assert table[2] == "| grid 1024 x 128 thr | 2x2 | 4x4 | 16/8 | i 1x4, j 1x4 | 2 | 443.6 / 446.3 | 0 | 244-246 |"
    assert table[3] == "| grid 1024 x 128 thr | 2x2 | 4x4 | 16/8 | i 1x4, j 2x2 | 1 | 422.0 / 422.0 | 1 | 230 |"
    assert "at or below" not in arrangement_table(rows)


def test_cold_round_odds_by_warp_arrangement_lean_on_the_shape_where_a_cell_is_thin():
    """``bench_cold_round.arrangement_hit_odds``: a pick fares as its (shape, arrangement) cell,
    drawn toward its shape's rate by the prior's pseudo-records; an unmeasured cell fares as the shape."""
    import sys

    sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
    from bench_cold_round import arrangement_hit_odds

    shape = {"geometry": "g", "fetch_bytes": [16, 8], "arrangements": {"i 1x4, j 2x2": 1, "i 4x1, j 1x4": 2}}
    by_shape = {"g | 16/8 B": {"records": 10, "at_or_below_target": 1}}
    cells = {"g | 16/8 B | i 1x4, j 2x2": {"records": 1, "at_or_below_target": 1}}
    odds = arrangement_hit_odds([shape], by_shape, cells, prior=2.0)
    fast, other = (1 + 2 * 0.1) / 3, 0.1
    assert odds["expected_picks_at_target_by_arrangement"] == round(fast + 2 * other, 3)
    assert odds["chance_of_a_pick_at_target_by_arrangement"] == round(1 - (1 - fast) * (1 - other) ** 2, 3)
    assert arrangement_hit_odds([dict(shape, geometry="h")], by_shape, cells, 2.0)[
        "expected_picks_at_target_by_arrangement"] == 0
