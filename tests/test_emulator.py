"""The emulator (ms_pruner.emulator): lowered tensor-core kernels run on the CPU against the exact
result, on kernels that are right and on kernels made wrong in the ways a pipeline goes wrong."""

import json

import numpy as np
import pytest
import tvm

from ms_pruner.workloads import parse_workload
from conftest import linear_task, workload_space

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


def test_a_model_task_is_held_against_its_own_function_run_on_the_cpu(tensor_intrinsics):
    """PrimFuncWorkload: a task that no workload spec names is checked against its unscheduled
    function compiled for the CPU (numpy agrees with it); an mma candidate of it emulates right, and
    the same kernel held against the function that subtracts the bias is wrong."""
    from ms_pruner.emulator import EmulatedChecker, PrimFuncWorkload
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search.space import DesignSpace
    from ms_pruner.space import tuning_space, tensor_instruction
    from ms_pruner.tuning.driver import normalized_mod

    workload = PrimFuncWorkload(linear_task(+1), "fused_matmul_cast_add")
    a, w, bias = workload.random_inputs(1)
    numpy_result = ((a.astype(np.float32) @ w.astype(np.float32)).astype(np.float16) + bias).astype(np.float64)
    assert np.abs(workload.reference([a, w, bias]) - numpy_result).max() <= 1e-2 * np.abs(numpy_result).max()
    mod = normalized_mod(linear_task(+1))
    _, target, generator = tuning_space("mma", mod, get_gpu_spec("h100").target())
    sch = DesignSpace(mod, target, space=generator).sample(1, seed=0)[0]
    assert str(tensor_instruction(sch.trace)).startswith("m16n8k")
    right = EmulatedChecker(workload, target).check(sch.mod)
    assert right.status == "right" and right.error < 1e-3, right
    wrong = EmulatedChecker(PrimFuncWorkload(linear_task(-1), "subtracted"), target).check(sch.mod)
    assert wrong.status == "wrong" and "over the tolerance" in wrong.reason, wrong


def test_a_task_that_random_inputs_cannot_check_is_refused_in_one_line():
    """Integer inputs (an embedding's indices would read outside the table) and results that are
    not finite on the random inputs (an exponential that overflows) leave nothing to hold a kernel
    against."""
    from tvm import te

    from ms_pruner.emulator import PrimFuncWorkload
    from ms_pruner.errors import UserError

    table, index = te.placeholder((16, 8), "float16", "table"), te.placeholder((4,), "int64", "index")
    shifted = te.compute((4, 8), lambda i, j: table[index[i] + 1, j], "shifted_take")
    with pytest.raises(UserError, match="computes an index from its integer input 'index'"):
        PrimFuncWorkload(te.create_prim_func([table, index, shifted]), "shifted_take")
    x = te.placeholder((64,), "float32", "x")
    growth = te.compute((64,), lambda i: te.exp(x[i] * 1000.0), "growth")
    workload = PrimFuncWorkload(te.create_prim_func([x, growth]), "exp")
    with pytest.raises(UserError, match="non-finite results"):
        workload.reference(workload.random_inputs(1))


def test_integer_inputs_draw_inside_the_axes_they_index():
    """A gather's index (through a cast, as Relax's ``take`` reads it) draws inside the smallest axis
    it indexes, so the reference reads the table; an integer input no index reads draws small
    non-negative values; an integer output is held exactly."""
    from tvm import te

    from ms_pruner.emulator import PrimFuncWorkload
    from ms_pruner.emulator.task import PLAIN_INTEGER_RANGE

    table, index = te.placeholder((12, 8), "float16", "table"), te.placeholder((64,), "int64", "index")
    other = te.placeholder((5, 64), "float16", "other")
    gathered = te.compute((64, 8), lambda i, j: table[index[i].astype("int32"), j] + other[index[i], i], "gathered")
    workload = PrimFuncWorkload(te.create_prim_func([table, other, index, gathered]), "gathered")
    data, others, ids = workload.random_inputs(1)
    assert workload.index_ranges == {"index": 5} and ids.dtype == np.int64
    assert ids.min() == 0 and ids.max() == 4 and workload.tolerance == 5e-2
    exact = data.astype(np.float64)[ids] + others.astype(np.float64)[ids, np.arange(64)][:, None]
    assert np.abs(workload.reference([data, others, ids]) - exact).max() < 1e-2
    narrowed = te.compute((64,), lambda i: index[i].astype("int32"), "narrowed")
    plain = PrimFuncWorkload(te.create_prim_func([index, narrowed]), "narrowed")
    (values,) = plain.random_inputs(1)
    assert plain.index_ranges == {"index": PLAIN_INTEGER_RANGE} and plain.tolerance == 0.0
    assert 0 <= values.min() and values.max() < PLAIN_INTEGER_RANGE and len(set(values.tolist())) > 8
    assert (plain.reference([values]) == values).all()


def test_a_parameter_under_a_square_root_draws_positive_inputs():
    """A batch norm's variance reaches its square root through two stores: it draws from
    POSITIVE_RANGE, so the reference and the emulated kernel see no NaN; the data stays in [-1, 1)."""
    from tvm import te

    from ms_pruner.emulator import PrimFuncWorkload

    x, var = te.placeholder((8, 4), "float32", "x"), te.placeholder((4,), "float32", "var")
    shifted = te.compute((4,), lambda c: var[c] + 1e-5, "shifted")
    root = te.compute((4,), lambda c: te.sqrt(shifted[c]), "root")
    out = te.compute((8, 4), lambda n, c: x[n, c] / root[c], "out")
    workload = PrimFuncWorkload(te.create_prim_func([x, var, out]), "batch_norm")
    data, variance = workload.random_inputs(1)
    assert workload.positive_inputs == {"var"} and variance.min() >= 0.25 and data.min() < 0
    assert np.isfinite(workload.reference([data, variance])).all()


def test_a_cross_thread_reduction_emulates_its_warp_shuffles(tensor_intrinsics):
    """A row sum with its reduction bound to 64 threads lowers to warp shuffles (a layer norm's or a
    softmax's kernels do the same); emulated, it computes the sums."""
    from tvm import te
    from tvm.s_tir import Schedule

    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.emulator import EmulatedChecker, PrimFuncWorkload
    from ms_pruner.hardware import get_gpu_spec

    x, k = te.placeholder((64, 256), "float32", "x"), te.reduce_axis((0, 256), "k")
    func = te.create_prim_func([x, te.compute((64,), lambda i: te.sum(x[i, k], axis=k), "total")])
    sch = Schedule(func)
    row, column = sch.get_loops(sch.get_sblock("total"))
    sch.bind(row, "blockIdx.x")
    sch.bind(sch.split(column, [None, 64])[1], "threadIdx.x")
    target = get_gpu_spec("h100").target()
    assert "tvm_warp_shuffle_down" in lowered_tir(sch.mod, target).script()
    check = EmulatedChecker(PrimFuncWorkload(func, "row_sum"), target).check(sch.mod)
    assert check.status == "right" and check.written == 1.0 and check.error < 1e-5, check


def test_a_shuffle_stays_in_its_segment_and_its_block():
    """``__shfl_sync`` semantics on two blocks of 48 threads (a second, partial warp each), width 16:
    an index wraps within the segment, a delta past the segment's or the block's end keeps the
    thread's own value."""
    from ms_pruner.emulator.memory import Threads
    from ms_pruner.emulator.warp_ops import shuffle

    threads = Threads(96, 48)
    value = threads.index * 10
    down = shuffle(threads, "tvm_warp_shuffle_down", value, 4, 16)[:, 0] // 10
    up = shuffle(threads, "tvm_warp_shuffle_up", value, 1, 16)[:, 0] // 10
    index = shuffle(threads, "tvm_warp_shuffle", value, 17, 16)[:, 0] // 10
    assert list(down[:16]) == list(range(4, 16)) + list(range(12, 16))
    assert down[44] == 44 and down[40] == 44 and down[47] == 47  # the block ends at 48: the second warp is 16 lanes
    assert up[48] == 48 and up[49] == 48 and up[16] == 16 and up[17] == 16
    assert index[0] == 1 and index[15] == 1 and index[16] == 17 and index[60] == 49
    wide = shuffle(threads, "tvm_warp_shuffle_down", value, 16, 32)[:, 0] // 10
    assert wide[0] == 16 and wide[33] == 33 and wide[40] == 40  # 33 + 16 and 40 + 16: past the block's 48
