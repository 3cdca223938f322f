"""The emulator (ms_pruner.emulator): lowered tensor-core kernels run on the CPU against the exact
result, on kernels that are right and on kernels made wrong in the ways a pipeline goes wrong."""

import json

import numpy as np
import pytest
import tvm

from ms_pruner.workloads import parse_workload
from conftest import workload_space

SMALL_K = "matmul:256x256x128:float16:float32"  # 2-8 k tiles: some mma pipelines are deeper than their loop


@pytest.fixture(scope="module")
def small_k(tensor_intrinsics):
    """Two mma candidates of SMALL_K for the H100: the space's first two draws of seed 0."""
    _, target, space = workload_space(SMALL_K, "mma")
    return target, space.sample(2, seed=0)


def _wait_counts(lowered):
    from ms_pruner.builder.wait_counts import rewrite_wait_counts

    counts = []
    for func in lowered.functions.values():
        rewrite_wait_counts(func.body, lambda count: counts.append(count))
    return counts


def test_a_pipeline_deeper_than_its_loop_gets_constant_waits_and_computes_right(small_k):
    """TVM's pipeline leaves such a prologue's wait count ``if_then_else(False & False, 2, 0)``, which
    CUDA code generation refuses; the builder's pipeline folds it, the kernel generates, and the
    emulator finds it computes the GEMM on every block."""
    from ms_pruner.builder import cuda_sources
    from ms_pruner.builder.worker import _ready_to_lower, lowered_tir
    from ms_pruner.emulator import EmulatedChecker

    target, candidates = small_k
    stock_counts = []
    for sch in candidates:
        with tvm.transform.PassContext(opt_level=3, config={"tirx.use_async_copy": 1, "tirx.disable_storage_rewrite": True}):
            pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
            stock_counts += _wait_counts(pipeline(tvm.tirx.transform.BindTarget(target)(_ready_to_lower(sch.mod))))
    assert any(type(c).__name__ != "IntImm" for c in stock_counts)
    checker = EmulatedChecker(parse_workload(SMALL_K), target)
    for sch in candidates:
        assert all(type(c).__name__ == "IntImm" for c in _wait_counts(lowered_tir(sch.mod, target)))
        assert "cp.async.wait_group" in cuda_sources(sch.mod, target, use_nvcc=False)[0]
        check = checker.check(sch.mod)
        assert check.status == "right" and check.written == 1.0 and check.error < 1e-5, check


def test_a_wait_that_lets_reads_run_ahead_of_their_copies_computes_wrong(small_k):
    """The same kernel with every cp.async wait one group later: shared memory is read before the
    copies land, and the emulator's output holds what nothing had written yet (NaN)."""
    from ms_pruner.builder.wait_counts import rewrite_wait_counts
    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.emulator import emulate

    target, candidates = small_k
    lowered = lowered_tir(candidates[0].mod, target)
    later = tvm.IRModule({gvar: func.with_body(rewrite_wait_counts(func.body, lambda c: tvm.tirx.IntImm("int32", int(c) + 1)))
                          if rewrite_wait_counts(func.body, lambda c: c) is not None else func
                          for gvar, func in lowered.functions.items()})
    workload = parse_workload(SMALL_K)
    inputs = workload.random_inputs(seed=1)
    for module, right in ((lowered, True), (later, False)):
        out = np.zeros(workload.output_shape(), dtype=workload.out_dtype)
        run = emulate(module, [*inputs, out])
        assert run.written[-1].all() and bool(np.all(np.isfinite(out))) == right


def test_an_access_outside_its_buffer_is_a_fault_not_a_neighbours_data(small_k):
    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.emulator import EmulationFault, emulate

    target, candidates = small_k
    a, b = parse_workload(SMALL_K).random_inputs(seed=1)
    with pytest.raises(EmulationFault, match="outside"):
        emulate(lowered_tir(candidates[0].mod, target), [a[:128], b, np.zeros((256, 256), np.float32)])


def test_a_padded_conv2d_copies_zeros_where_its_guard_fails(tensor_intrinsics):
    """An mma conv2d's input copies are guarded cp.async (the padding); where a guard fails TVM's copy
    stores zeros, and without them the output would read NaN from shared memory."""
    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.emulator import EmulatedChecker

    spec = "conv2d_nhwc:4x16x16x64x64k3s1p1:float16:float32"
    _, target, space = workload_space(spec, "mma")
    sch = space.sample(1, seed=0)[0]
    assert "cp_async_raw" in lowered_tir(sch.mod, target).script() and " <= " in lowered_tir(sch.mod, target).script()
    check = EmulatedChecker(parse_workload(spec), target).check(sch.mod)
    assert check.status == "right" and check.error < 1e-5, check


def test_an_epilogue_kernel_is_checked_where_the_emulated_gemm_blocks_wrote(tensor_intrinsics, monkeypatch):
    """The mma family's dense_bias built without the fused epilogue is a GEMM kernel and an epilogue
    kernel; with one GEMM block run, the epilogue's outputs from the GEMM's other blocks are not
    checked, the rest are, and are right."""
    from ms_pruner.emulator import EmulatedChecker, EmulationConfig

    monkeypatch.setenv("MS_PRUNER_FUSE_EPILOGUE", "0")

    spec = "dense_bias:128x256x64:float16:float32"
    _, target, space = workload_space(spec, "mma")
    sch = space.sample(1, seed=0)[0]
    check = EmulatedChecker(parse_workload(spec), target, EmulationConfig(blocks=1, max_threads=0)).check(sch.mod)
    assert check.status == "right" and len(check.blocks) == 2 and check.blocks[0].startswith("main_kernel: 1 of"), check
    grid = int(check.blocks[0].split(" of ")[1])
    assert check.written == pytest.approx(1 / grid), check


@pytest.mark.slow
def test_the_best_h100_conv2d_kernel_emulates_right(h100_runs, capsys):
    """``ms-pruner check --emulate`` on the committed H100 Pruner conv2d run (its best kernel ran right
    on the GPU): right here too, for the record's own target, without a GPU."""
    from ms_pruner.cli import main

    workload = "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32"
    run = h100_runs(workload.replace(":", "_"), "pruner")
    assert main(["check", "--work-dir", run, "--workload", workload, "--emulate", "--json"]) == 0
    (check,) = json.loads(capsys.readouterr().out)
    assert check["passed"] and check["emulated"]["status"] == "right" and check["instruction"] == "wmma"
