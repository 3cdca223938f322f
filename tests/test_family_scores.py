"""``ms-pruner analyze`` on a database of both tensor-core rule families: the ranking within each
family and instruction, their measured/estimated scale, and the order across the two."""

import json

import pytest

from ms_pruner.evaluation import RecordEstimate, family_scores
from ms_pruner.evaluation.family_scores import cross_family_concordance
from conftest import workload_space


def _record(instruction, predicted_us, measured_us):
    measured = measured_us * 1e-6 if measured_us is not None else None
    return RecordEstimate(predicted_s=predicted_us * 1e-6, measured_s=measured, valid=True, reason="",
                          family="wmma" if instruction == "wmma" else "mma", instruction=instruction)


def test_cross_family_pairs_count_those_ordered_as_measured_and_ties_half():
    records = [_record("wmma", 100, 300), _record("wmma", 200, 100),
               _record("m16n8k8", 150, 200), _record("m16n8k16", 150, 200), _record("m16n8k16", 90, None)]
    # wmma(100, 300) against each mma (150, 200): estimated faster, measured slower; wmma(200, 100):
    # estimated slower, measured faster. 0 of 4 pairs agree; the unmeasured record makes no pair.
    assert cross_family_concordance(records) == 0.0
    tied = [_record("wmma", 150, 300), _record("m16n8k8", 150, 200), _record("m16n8k16", 120, 250)]
    assert cross_family_concordance(tied) == pytest.approx((0.5 + 1.0) / 2)
    assert cross_family_concordance([_record("wmma", 1, 2), _record("wmma", 2, 3)]) is None
    scores = family_scores(records)
    assert scores["groups"]["mma"]["records"] == 3 and scores["groups"]["mma"]["scored"] == 2
    assert scores["groups"]["m16n8k16"]["records"] == 2 and scores["groups"]["wmma"]["scored"] == 2
    assert scores["fastest_measured"] == "wmma" and scores["fastest_estimated"] == "wmma"
    assert family_scores([RecordEstimate(1e-6, 2e-6, True, "")]) is None  # off tensor cores


def test_analyze_scores_each_family_and_their_scale_on_one_database(tensor_intrinsics, tmp_path, capsys):
    """Records of both families with latencies set to the analyzer's estimates, the mma ones at
    twice theirs: each family ranks perfectly, their medians show the 2x between them."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.cli import main
    from ms_pruner.space import sketch_family

    _, target, space = workload_space("matmul:1024x1024x1024:float16:float32", "all")
    mod = space.mod
    analyzer = StaticAnalyzer.for_target(target)
    picked = {"wmma": [], "mma": []}
    for sch in space.sample(24, seed=0):
        estimate = analyzer.estimate(sch)
        family = sketch_family(sch.trace)
        if estimate.valid and len(picked[family]) < 4 and estimate.latency_s not in {t for _, t in picked[family]}:
            picked[family].append((sch.trace, estimate.latency_s))
    assert all(len(found) == 4 for found in picked.values())
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    for family, scale in (("wmma", 1.0), ("mma", 2.0)):
        for trace, latency in picked[family]:
            database.commit_tuning_record(ms.database.TuningRecord(trace, workload, [latency * scale], target, args))
    assert main(["analyze", "--db", str(tmp_path), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)["families"]
    for family, scale in (("wmma", 1.0), ("mma", 2.0)):
        group = scores["groups"][family]
        assert group["scored"] == 4 and group["measured_over_estimate_median"] == pytest.approx(scale)
        assert group["spearman"] == pytest.approx(1.0)
    instructions = [name for name in scores["groups"] if name not in ("wmma", "mma")]
    assert instructions and set(instructions) <= {"m16n8k8", "m16n8k16"}
    assert 0.0 <= scores["cross_family_concordance"] <= 1.0
    assert main(["analyze", "--db", str(tmp_path)]) == 0
    assert "mma: 4/4 scored" in capsys.readouterr().out


def test_shared_memory_summary_counts_the_records_beyond_the_launch_default():
    from ms_pruner.evaluation.database_report import format_shared_memory, shared_memory_summary

    def sized(shared_kb, measured_us):
        record = _record("wmma", 100, measured_us)
        record.shared_bytes = shared_kb * 1024
        return record

    records = [sized(32, 300), sized(48, 250), sized(64, 200), sized(200, None), sized(96, 400)]
    summary = shared_memory_summary(records, 48 * 1024)
    assert summary["over_default"] == 3 and summary["over_default_measured"] == 2
    assert summary["largest_measured_bytes"] == 96 * 1024  # the 200 KB one did not run
    assert summary["best_over_default_us"] == pytest.approx(200) and summary["best_within_default_us"] == pytest.approx(250)
    assert summary["fastest_shared_bytes"] == 64 * 1024
    assert "3/5 records, 2 ran (up to 96.0 KB)" in format_shared_memory(summary)
    assert shared_memory_summary([RecordEstimate(1e-6, 2e-6, True, "")], 48 * 1024) is None  # a CPU database


@pytest.mark.slow
def test_the_h200_runs_on_all_ran_kernels_opted_in_beyond_48_kb(h200_runs, tensor_intrinsics, capsys):
    """TVM's CUDA runtime raises a kernel's dynamic shared memory limit before its launch: on the
    H200 (2026-11-27, --space all) every Pruner record over 48 KB a block ran, its best among them."""
    from ms_pruner.cli import main

    assert main(["analyze", "--db", h200_runs("matmul_4096x4096x4096_float16_float32", "pruner"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    summary = report["shared_memory"]
    assert summary["over_default"] == summary["over_default_measured"] == 151
    assert summary["largest_measured_bytes"] == 200 * 1024
    assert summary["best_over_default_us"] < summary["best_within_default_us"]
    assert summary["fastest_shared_bytes"] > 48 * 1024
    assert sum(r["shared_bytes"] > 48 * 1024 for r in report["records"]) == 151
