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
