"""``ms-pruner check``: a run's best kernel run again here and held against the exact result."""

import json

import pytest

from ms_pruner.cli import main

SPEC = "matmul:64x64x64:float32:float32"


@pytest.mark.slow
def test_check_runs_the_best_kernel_and_holds_it_against_the_exact_result_and_torch(tmp_path, capsys):
    work_dir = str(tmp_path / "work")
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "4", "--per-iter", "4", "--strategy", "stock",
                 "--seed", "0", "--work-dir", work_dir, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["check", "--work-dir", work_dir, "--workload", SPEC, "--target", "llvm", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["passed"] and result["error"] < 1e-5 and result["tolerance"] == 1e-3
    assert result["torch_error"] is not None and result["torch_error"] < 1e-5
    # --top: the run's fastest kernels, each built and checked, fastest first.
    assert main(["check", "--work-dir", work_dir, "--workload", SPEC, "--target", "llvm", "--top", "3", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)
    assert [c["rank"] for c in top] == [1, 2, 3] and all(c["passed"] and c["instruction"] is None for c in top)
    assert top[0]["best_latency_s"] == result["best_latency_s"] <= top[1]["best_latency_s"] <= top[2]["best_latency_s"]
    assert main(["check", "--work-dir", work_dir, "--workload", SPEC, "--target", "llvm", "--top", "0"]) == 2
    assert "--top" in capsys.readouterr().err
    # The same records held against another workload: nothing of it to check, one line, exit 2.
    assert main(["check", "--work-dir", work_dir, "--workload", "matmul:32x32x32:float32:float32",
                 "--target", "llvm"]) == 2
    assert "no valid record" in capsys.readouterr().err
    assert main(["check", "--work-dir", work_dir, "--target", "llvm"]) == 2


@pytest.mark.slow
def test_a_runs_best_instruction_skips_failed_records(h200_runs, tensor_intrinsics):
    """compare.md names the instruction of each run's best, as tune_tir reads it: the fastest valid
    record's (``best_record``). The H200 stock run on the `all` space holds 27 m16n8k8 records that
    failed to build: its best is a WMMA kernel."""
    from ms_pruner.database.records import best_record, is_valid, open_database, records_for
    from ms_pruner.space import tensor_instruction
    from ms_pruner.tuning.driver import normalized_mod
    from ms_pruner.workloads import parse_workload

    stock = h200_runs("matmul_4096x4096x4096_float16_float32", "stock")
    records = records_for(open_database(stock), normalized_mod(
        parse_workload("matmul:4096x4096x4096:float16:float32").prim_func()))
    failed = [r for r in records if not is_valid(r)]
    assert {tensor_instruction(r.trace) for r in failed} == {"m16n8k8"} and len(failed) == 27
    assert tensor_instruction(best_record(records).trace) == "wmma"
