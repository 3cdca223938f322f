"""A warp's main loop issued from its SASS control words, and the issue floor it sets an estimate."""

import pytest

from conftest import needs_nvcc
from ms_pruner.builder.sass_issue import SassInstruction, hmma_flops, main_loop, warp_trip_cycles

LATENCIES = {"LDSM": 30}


def _ins(address, opcode, stall=1, write=7, wait=0, operands=""):
    return SassInstruction(address, opcode, operands, stall, write, 7, wait)


def test_a_warp_waits_for_the_fragment_its_mma_reads():
    """LDSM sets scoreboard 0; the HMMA that waits on it issues 30 cycles after the load, the one
    that does not wait 2 cycles after it; a trip is the last issue plus its stall."""
    loaded = [_ins(0, "LDSM.16.M88.4", stall=2, write=0), _ins(16, "HMMA.16816.F32", stall=8, wait=1),
              _ins(32, "HMMA.16816.F32", stall=8)]
    assert warp_trip_cycles(loaded, LATENCIES, 20, trips=1) == 30 + 8 + 8
    independent = [_ins(0, "LDSM.16.M88.4", stall=2, write=0), _ins(16, "HMMA.16816.F32", stall=8)]
    assert warp_trip_cycles(independent, LATENCIES, 20, trips=1) == 2 + 8


def test_the_main_loop_is_the_backward_branch_with_the_most_mma_flops():
    kernel = [_ins(0, "LDSM.16.M88.4"), _ins(16, "HMMA.1688.F32"), _ins(32, "BRA", operands=" 0x0"),
              _ins(48, "HMMA.16816.F32"), _ins(64, "HMMA.16816.F32"), _ins(80, "BRA", operands=" 0x30"),
              _ins(96, "BRA", operands=" 0x60")]
    assert [i.address for i in main_loop(kernel)] == [48, 64, 80]
    assert (hmma_flops("HMMA.16816.F32"), hmma_flops("HMMA.1688.F32"), hmma_flops("IMAD")) == (4096.0, 2048.0, 0.0)
    assert main_loop(kernel[:1]) is None


@needs_nvcc
@pytest.mark.slow  # 14 s alone on 2 cores: it compiles two H100 records with nvcc
def test_the_floor_lifts_the_h100_kernels_ptxas_feeds_one_fragment_at_a_time(h100_runs, tensor_intrinsics):
    """Two records of the first H100 Pruner matmul run, both 128 x 128 block tiles of 4 warps over
    64 trips: record 202 measured 422.0 us, record 79 (168 registers by ptxas against 230) 834 us,
    estimated 1.2x apart. ptxas feeds record 79's MMAs one fragment load at a time; its lone warp
    takes over 1.5x record 202's cycles a trip, and its floor lifts its estimate by over a quarter
    while record 202 keeps its own."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.database import replay_record
    from ms_pruner.database.records import mean_latency, records_in_file_order
    from ms_pruner.evaluation.database_report import RecordEstimate, ptxas_checks, register_summary

    records = records_in_file_order(h100_runs("matmul_4096x4096x4096_float16_float32", "pruner"))
    analyzer = StaticAnalyzer.for_target(records[0].target)
    rows = []
    for index in (202, 79):
        mod = replay_record(records[index]).mod
        estimate = analyzer.estimate(mod)
        rows.append(RecordEstimate(estimate.latency_s, mean_latency(records[index]), True, "",
                                   registers=ptxas_checks(mod, records[index].target, estimate, analyzer)))
    (fast,), (slow,) = rows[0].registers, rows[1].registers
    assert rows[0].measured_s * 1.9 < rows[1].measured_s and rows[1].predicted_s < 1.25 * rows[0].predicted_s
    assert slow.warp_trip_cycles > 1.5 * fast.warp_trip_cycles
    assert fast.issue_floor_s < fast.latency_estimate_s < 1.25 * slow.latency_estimate_s < slow.issue_floor_s
    summary = register_summary(rows)
    assert (summary["records_with_sass"], summary["lifted_by_issue_floor"]) == (2, 1)
