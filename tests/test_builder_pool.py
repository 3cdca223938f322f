"""Our builder keeps its worker processes across batches, and builds as LocalBuilder does."""

import numpy as np

from conftest import needs_nvcc
from ms_pruner.builder import make_builder
from ms_pruner.builder.pool import KeptPoolBuilder
from ms_pruner.hardware import get_gpu_spec
from ms_pruner.hardware.target import llvm_target
from ms_pruner.search import DesignSpace
from ms_pruner.workloads import parse_workload


def _inputs(schedules, target):
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    return [BuilderInput(s.mod, target) for s in schedules]


def test_workers_started_once_serve_every_batch_and_build_runnable_kernels():
    import tvm
    workload = parse_workload("matmul:32x32x32:float32:float32")
    target = llvm_target(2)
    schedules = DesignSpace(workload.prim_func(), target).sample(6, seed=3)
    builder = make_builder("pruner", max_workers=2)
    try:
        builder.start_workers()
        started = builder.worker_pids()
        assert len(started) == 2
        first = builder.build(_inputs(schedules[:3], target))
        second = builder.build(_inputs(schedules[3:], target))
        assert builder.worker_pids() == started, "a batch started new worker processes"
        assert [r.error_msg for r in first + second] == [None] * 6
        a, b = np.random.rand(32, 32).astype("float32"), np.random.rand(32, 32).astype("float32")
        for result in first + second:
            kernel = tvm.runtime.load_module(str(result.artifact_path))
            c = tvm.runtime.tensor(np.zeros((32, 32), "float32"))
            kernel(tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
            np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)
    finally:
        builder.close()
    assert not builder.running


def test_a_worker_is_replaced_after_its_uses():
    from ms_pruner.builder import build_candidate, export_candidate

    target = llvm_target(2)
    schedules = DesignSpace(parse_workload("matmul:32x32x32:float32:float32").prim_func(), target).sample(3, seed=5)
    builder = KeptPoolBuilder(max_workers=1, timeout_sec=60.0, f_build=build_candidate, f_export=export_candidate,
                              uses_per_worker=3)
    try:
        builder.build(_inputs(schedules[:2], target))
        first = builder.worker_pids()  # the worker's third use
        results = builder.build(_inputs(schedules[2:], target))
        assert results[0].error_msg is None
        assert builder.worker_pids() != first
    finally:
        builder.close()


@needs_nvcc
def test_each_builder_keeps_its_device_code_setting(tensor_intrinsics):
    """Two builders of one process: the one made first still packs cubin after the second, made
    with ``compile_device_code=False``, changed the process environment its workers would inherit."""
    from ms_pruner.builder import cuda_runtime_loaded, device_module_formats

    if cuda_runtime_loaded():
        return  # with TVM's CUDA runtime both compile in code generation; the setting picks the compiler
    target = get_gpu_spec("h100").target()
    schedules = DesignSpace(parse_workload("matmul:1024x1024x1024:float16:float32").prim_func(), target).sample(
        2, seed=11)
    compiled = make_builder("pruner", max_workers=1)
    source = make_builder("pruner", max_workers=1, compile_device_code=False)
    try:
        kept_source = source.build(_inputs(schedules[:1], target))
        kept_cubin = compiled.build(_inputs(schedules[1:], target))
        assert device_module_formats(str(kept_source[0].artifact_path)) == ["cuda"]
        assert device_module_formats(str(kept_cubin[0].artifact_path)) == ["cubin"]
    finally:
        compiled.close()
        source.close()
