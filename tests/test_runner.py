"""The runner: integer arguments a kernel can index with, and a worker that outlives a kernel that
breaks its CUDA context (both on llvm with the real builder and runner)."""

import numpy as np
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

from ms_pruner.builder import (alloc_argument, breaks_cuda_context, cached_alloc_argument, close_builder,
                               forget_cached_arguments, make_builder, make_runner)

CPU_TARGET = tvm.target.Target("llvm")
FLOAT32, INT64 = "float32", "int64"  # names: a string in an annotation reads to linters as a forward reference


@T.prim_func(s_tir=True)
def take_head(qkv: T.Buffer((3, 2, 64), FLOAT32), index: T.Buffer((), INT64), out: T.Buffer((2, 64), FLOAT32)):
    """BERT's q, k or v out of the fused QKV tensor, as Relax legalizes ``qkv[0]``: a 0-d index."""
    for i, j in T.grid(2, 64):
        with T.sblock("T_take"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = qkv[index[()], vi, vj]


@T.prim_func(s_tir=True)
def faulting_copy(a: T.Buffer((4,), FLOAT32), b: T.Buffer((4,), FLOAT32)):
    """Fails as a GPU kernel that made an illegal access reports it (the arguments are >= 1)."""
    assert a[0] < T.float32(0), "CUDA: an illegal memory access was encountered"
    for i in range(4):
        with T.sblock("copy"):
            vi = T.axis.spatial(4, i)
            b[vi] = a[vi]


@T.prim_func(s_tir=True)
def copy(a: T.Buffer((4,), FLOAT32), b: T.Buffer((4,), FLOAT32)):
    for i in range(4):
        with T.sblock("copy"):
            vi = T.axis.spatial(4, i)
            b[vi] = a[vi]


def _measure(runner, funcs):
    """Each PrimFunc built by our builder and timed by ``runner`` on this CPU: the RunnerResults."""
    builder = make_builder(max_workers=1)
    try:
        built = builder.build([ms.builder.BuilderInput(tvm.IRModule({"main": f}), CPU_TARGET) for f in funcs])
    finally:
        close_builder(builder)
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_prim_func(f))
              for b, f in zip(built, funcs)]
    return [future.result() for future in runner.run(inputs)]


def test_integer_arguments_are_zeros_and_the_rest_random_filled():
    """MetaSchedule's own fill writes float bit patterns into integer tensors: an index far out of
    any axis. Ours leaves them zero, and floats as MetaSchedule fills them."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    info = [["TENSOR", "float32", [3, 2, 64]], ["TENSOR", "int64", []], ["TENSOR", "int32", [40]],
            ["TENSOR", "float32", [2, 64]]]
    (stock,) = default_alloc_argument(tvm.cpu(0), info, 1)
    assert int(stock[1].numpy()) > 3 and int(stock[2].numpy().min()) > 100
    forget_cached_arguments()
    for (args,) in (alloc_argument(tvm.cpu(0), info, 1), cached_alloc_argument(tvm.cpu(0), info, 1)):
        assert int(args[1].numpy()) == 0 and not args[2].numpy().any()
        values = args[0].numpy()
        assert values.min() >= 1.0 and values.max() <= 10.0 and len(np.unique(values)) > 100
    forget_cached_arguments()


@pytest.mark.parametrize("reuse_arguments", [True, False])
def test_a_gather_by_an_integer_argument_is_measured(reuse_arguments):
    (result,) = _measure(make_runner(reuse_arguments=reuse_arguments), [take_head])
    assert result.error_msg is None and result.run_secs and float(result.run_secs[0]) > 0


def test_the_runner_starts_a_new_worker_after_a_kernel_breaks_its_cuda_context(caplog):
    """Both faulting candidates are run errors, each followed by a new worker; the copy after them
    is measured (in a broken CUDA context it would fail too)."""
    runner = make_runner()
    first_pool = runner.pool
    results = _measure(runner, [faulting_copy, faulting_copy, copy])
    assert [breaks_cuda_context(r.error_msg) for r in results] == [True, True, False]
    assert results[2].error_msg is None and float(results[2].run_secs[0]) > 0
    assert runner.restarts == 2 and runner.pool is not first_pool
    assert caplog.text.count("the runner starts a new worker for the next") == 2


def test_which_errors_break_a_cuda_context():
    assert breaks_cuda_context("RuntimeError: CUDA: an illegal memory access was encountered")
    assert breaks_cuda_context("CUDALaunch Error: CUDA_ERROR_MISALIGNED_ADDRESS\n grid=(1,1,1)")
    assert breaks_cuda_context("CUDA: unspecified launch failure")
    assert breaks_cuda_context("CUDA: device-side assert triggered")
    assert not breaks_cuda_context("LocalRunner: Timeout, killed after 30 seconds")
    assert not breaks_cuda_context("CUDA: out of memory")
    assert not breaks_cuda_context(None)


@pytest.mark.slow
def test_a_gather_by_an_integer_argument_is_measured_on_an_rpc_server(tmp_path):
    """The fleet's RPCRunner fills arguments on the server the same way (a tracker and a server on loopback)."""
    from ms_pruner.tuning.fleet import LocalFleet, make_fleet_runner

    with LocalFleet(str(tmp_path), "runner-test", 1) as running:
        (result,) = _measure(make_fleet_runner(running.tracker, CPU_TARGET), [take_head])
    assert result.error_msg is None and result.run_secs and float(result.run_secs[0]) > 0
