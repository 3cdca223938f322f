"""``ms-pruner check``: a run's best kernel run again here and held against the exact result."""

import json

import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.support.tar import tar

import pytest

from ms_pruner.cli import main

SPEC = "matmul:64x64x64:float32:float32"
FLOAT32 = "float32"


def _asserting_copy(message: str, directory) -> str:
    """A copy whose first element must be negative, failing as a kernel reports ``message``: its
    exported artifact."""

    @T.prim_func(s_tir=True)
    def func(a: T.Buffer((4,), FLOAT32), b: T.Buffer((4,), FLOAT32)):
        assert a[0] < T.float32(0), message
        for i in range(4):
            with T.sblock("copy"):
                vi = T.axis.spatial(4, i)
                b[vi] = a[vi]

    path = str(directory / f"copy{abs(hash(message))}.tar")
    tvm.compile(tvm.IRModule({"main": func}), target="llvm").export_library(path, fcompile=tar)
    return path


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
    # Without the spec: the run's one workload against its unscheduled function, no torch beside it.
    assert main(["check", "--work-dir", work_dir, "--target", "llvm", "--json"]) == 0
    (by_function,) = json.loads(capsys.readouterr().out)
    assert by_function["workload"] == "C(64x64:float32, 64x64:float32, 64x64:float32) on llvm", by_function
    assert by_function["passed"] and by_function["torch_error"] is None
    assert by_function["best_latency_s"] == result["best_latency_s"] and by_function["error"] < 1e-5
    assert main(["check", "--compare", str(tmp_path), "--workload", SPEC]) == 2
    assert "--workload goes with --work-dir" in capsys.readouterr().err


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


def _commit(database, mod, trace, target, latency_s):
    from tvm.s_tir import meta_schedule as ms

    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    database.commit_tuning_record(ms.database.TuningRecord(trace, database.commit_workload(mod), [latency_s],
                                                           target, args))


def test_a_work_dir_without_a_spec_has_each_workload_held_against_its_own_function(tmp_path, capsys,
                                                                                    tensor_intrinsics):
    """``check --work-dir`` alone (a tune-model work dir, a PrimFunc tuned from Python): each workload's
    best record against the workload's unscheduled function. A Linear task's mma kernel for the H100
    emulates right; an embedding's gather (integer indices, drawn inside the table) measured on the
    CPU is checked here and skipped by the emulator, which runs CUDA kernels; a task with no valid
    record is skipped; each skip says why, and with nothing checked the exit is 1."""
    from tvm import te
    from tvm.s_tir import Schedule

    from ms_pruner.database import open_database
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search.space import DesignSpace
    from ms_pruner.space import tuning_space
    from ms_pruner.tuning.driver import normalized_mod
    from conftest import linear_task

    work_dir = str(tmp_path / "work")
    database = open_database(work_dir, create=True)
    table, index = te.placeholder((16, 8), "float16", "table"), te.placeholder((4,), "int64", "index")
    take = normalized_mod(te.create_prim_func([table, index, te.compute((4, 8), lambda i, j: table[index[i], j],
                                                                         "take")]))
    _commit(database, take, Schedule(take).trace, tvm.target.Target("llvm"), 2e-6)
    assert main(["check", "--work-dir", work_dir, "--emulate"]) == 1
    assert "skip take(16x8:float16, 4:int64, 4x8:float16) on llvm" in capsys.readouterr().out
    assert main(["check", "--work-dir", work_dir, "--target", "llvm"]) == 0
    assert "ok   take(16x8:float16, 4:int64, 4x8:float16) on llvm" in capsys.readouterr().out

    linear = normalized_mod(linear_task(+1))
    _, target, generator = tuning_space("mma", linear, get_gpu_spec("h100").target())
    (sch,) = DesignSpace(linear, target, space=generator).sample(1, seed=0)
    _commit(database, linear, sch.trace, target, 3e-6)
    failed = normalized_mod(linear_task(+1, m=64))
    _commit(database, failed, sch.trace, target, 1e10)
    assert main(["check", "--work-dir", work_dir, "--emulate", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    (right,) = [c for c in checks if c["skipped"] is None]
    assert right["workload"].startswith("matmul+T_add(128x64:float16, 64x128:float16") and right["passed"]
    assert right["emulated"]["status"] == "right" and right["instruction"].startswith("m16n8k")
    skipped = sorted((c["workload"].split(":")[0], c["skipped"]) for c in checks if c["skipped"] is not None)
    assert [name for name, _ in skipped] == ["matmul+T_add(64x64", "take(16x8"], skipped
    assert skipped[0][1] == "no valid record" and "the emulator runs CUDA kernels" in skipped[1][1]
    assert not any(c["passed"] for c in checks if c["skipped"] is not None)
    assert main(["check", "--work-dir", work_dir, "--emulate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[0] for line in lines) == ["ok", "skip", "skip"], lines
    assert any(line.startswith("skip matmul+T_add(64x64") and line.endswith("no valid record") for line in lines)
    # Run here instead: a CUDA record is not run on this CPU (only emulated), one line says so.
    assert main(["check", "--work-dir", work_dir, "--target", "llvm"]) == 0
    out = capsys.readouterr().out
    assert "skip matmul+T_add(128x64:float16" in out and "measured on cuda, not this llvm device" in out
    assert "ok   take(16x8" in out




def test_a_kernel_that_fails_here_is_one_failed_check_and_one_that_breaks_the_context_gets_a_new_worker(tmp_path):
    """A kernel that fails to run is one FAIL line with the device's error, and the next kernel is
    still run; after one that breaks the CUDA context (a GPU's illegal address, raised here by a
    CPU kernel's assert with CUDA's text) the next kernel runs in a new worker process."""
    from ms_pruner.tuning.check import DeviceSession, OutputCheck, _report_line, _run_on_device

    positive = np.ones(4, dtype="float32")
    runs = [("the output index is out of range", positive), ("unused", -positive),
            ("CUDA: an illegal memory access was encountered", positive), ("unused", -positive)]
    checks = [OutputCheck("wd", f"copy{k}", 1e-6, float("nan"), 1e-3, None, rank=k) for k in range(1, 5)]
    restarts = []
    with DeviceSession() as session:
        for check, (message, data) in zip(checks, runs):
            artifact = _asserting_copy(message, tmp_path)
            _run_on_device(check, lambda: float(np.abs(session.worker.output(
                artifact, "cpu", [data], np.zeros(4, dtype="float32")) - data).max()))
            restarts.append(session.worker.restarts)
    assert restarts == [0, 0, 1, 1] and session.worker.pool is None
    first, second, faulting, after = checks
    assert first.failure.endswith("the output index is out of range") and not first.passed
    assert second.failure is None and second.error == 0.0 and second.passed
    assert "illegal memory access" in faulting.failure and not faulting.passed
    assert after.failure is None and after.error == 0.0 and after.passed
    lines = [_report_line(c) for c in checks]
    assert lines[0].startswith("FAIL copy1") and lines[0].endswith("the output index is out of range"), lines
    assert lines[1].startswith("ok   copy2") and lines[2].startswith("FAIL copy3") and lines[3].startswith("ok   copy4")
