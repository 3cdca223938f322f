"""The builder builds every tensor-core candidate the stock path loses, and ships cubin."""

import pytest

from conftest import needs_nvcc
from ms_pruner.builder import (
    cuda_compile_scope,
    cuda_runtime_loaded,
    device_module_formats,
    lower_candidate,
    make_builder,
    replace_cuda_sources,
)
from ms_pruner.builder.cuda_binary import ImportBlob
from ms_pruner.hardware import get_gpu_spec
from ms_pruner.search import DesignSpace
from ms_pruner.workloads import parse_workload

MM4096 = "matmul:4096x4096x4096:float16:float32"


@pytest.fixture(scope="module")
def candidates(tensor_intrinsics):
    """32 random post-processed tensor-core candidates per GPU (real sampling + postprocs)."""
    workload = parse_workload(MM4096)
    out = {}
    for gpu in ("h100", "a100"):
        target = get_gpu_spec(gpu).target()
        space = DesignSpace(workload.prim_func(), target)
        out[gpu] = (target, space.sample(32, seed=11))
    return out


@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.slow
def test_every_sampled_candidate_lowers(candidates, gpu):
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    target, schedules = candidates[gpu]
    assert len(schedules) >= 32
    assert any("Tensorize" == inst.kind.name for inst in schedules[0].trace.insts)
    errors = []
    stock_failures = 0
    for sch in schedules:
        try:
            lower_candidate(sch.mod, target)
        except Exception as err:  # pylint: disable=broad-except
            errors.append(str(err).splitlines()[-1])
        try:
            with cuda_compile_scope(target):  # where TVM's CUDA runtime loads, codegen compiles: not NVRTC
                default_build(sch.mod, target, None)
        except Exception as err:  # pylint: disable=broad-except
            assert "tvm_access_ptr element type must match" in str(err)
            stock_failures += 1
    assert errors == []
    assert stock_failures > 0, "the stock build path no longer fails: is the workaround still needed?"


def test_a_write_back_whose_vectors_cross_fragment_rows_lowers(tensor_intrinsics):
    """The WMMA rule samples 1-4 lanes for the accumulators' write-back; 3 lanes over 16-column
    fragments cross rows, and for this tiling of BERT's QKV GEMM (a seeded H100 cold round's pick)
    TVM's own pipeline stops at ThreadSync on what its common-subexpression pass made of that index.
    The builder lowers it again without that pass: gathered lanes, the same kernel otherwise."""
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    from ms_pruner.builder import cuda_sources
    from ms_pruner.evaluation.space_report import tensor_intrinsics as intrinsics_of
    from ms_pruner.search.droplet import TILE_SAMPLES
    from ms_pruner.space import tuning_space

    workload = parse_workload("matmul_nt:2048x2304x768:float16:float32")
    _, target, generator = tuning_space("all", workload.prim_func(), get_gpu_spec("h100").target())
    space = DesignSpace(workload.prim_func(), target, space=generator)
    sketch = next(s for s in space.sketches if "wmma_load_16x16x16_f16_b_trans_shared_dyn" in intrinsics_of(s))
    tiles = iter([[2, 8, 4, 1, 2], [8, 2, 1, 3, 3], [6, 4, 2]])
    categorical = iter([2, 2, 3, 3])  # write-back 3 lanes; A 4, B 8 lanes; unroll step 64

    def provide(inst, inputs, attrs, decision):
        if inst.kind.name == "SampleCategorical":
            return next(categorical)
        return next(tiles) if inst.kind.name in TILE_SAMPLES else decision

    sch = space.replay(sketch, seed=1, decision_provider=provide)
    assert sch is not None and "vectorized(3)" in sch.mod.script()
    assert any("make_float3" in source for source in cuda_sources(sch.mod, target, use_nvcc=False))
    with pytest.raises(Exception, match="eval_vec_"):
        with cuda_compile_scope(target):
            default_build(sch.mod, target, None)


def test_an_fp16_write_back_of_three_lanes_is_unrolled_builds_and_computes(tensor_intrinsics):
    """A Linear layer's task as Relax's mixed precision makes it (fp32 accumulators, the product cast
    to fp16 before its bias) on the WMMA space: a write-back of 3 lanes a thread is a 3-lane fp16
    vector, and TVM's CUDA code generation stops on it. The builder unrolls that loop: the kernel
    compiles (nvcc) and computes the task (emulated)."""
    import tvm

    from conftest import linear_task
    from ms_pruner.builder import cuda_sources
    from ms_pruner.builder.wait_counts import PRUNER_TIR_PIPELINE
    from ms_pruner.builder.worker import _pass_context, _ready_to_lower
    from ms_pruner.emulator import EmulatedChecker, PrimFuncWorkload
    from ms_pruner.space import tuning_space
    from ms_pruner.tuning.driver import normalized_mod

    func = linear_task(1, 128, 384, 64)
    mod = normalized_mod(func)
    _, target, generator = tuning_space("wmma", mod, get_gpu_spec("h100").target())
    sch = next(s for s in DesignSpace(mod, target, space=generator).sample(16, seed=0)
               if "vectorized(3)" in s.mod.script())
    _ready_to_lower(mod)  # registers the builder's pipeline
    with pytest.raises(Exception, match="even number of lanes for half type"):  # the schedule as sampled
        with _pass_context(target):
            tvm.compile(sch.mod, target=target, tir_pipeline=PRUNER_TIR_PIPELINE)
    assert "vectorized(3)" not in _ready_to_lower(sch.mod).script()
    assert cuda_sources(sch.mod, target)
    check = EmulatedChecker(PrimFuncWorkload(func, "fused_matmul_cast_add"), target).check(sch.mod)
    assert check.status == "right", check


def test_the_mma_index_maps_equal_tvms():
    """The builder's workers register the mma lowering's index maps themselves (mma_layouts.py); they
    must map every element of a tile as TVM's tensor_intrin module does."""
    from tvm.s_tir.tensor_intrin import cuda as intrinsics

    from ms_pruner.builder.mma_layouts import accumulator_position, ldmatrix_position

    for i in range(16):
        for j in range(16):
            assert ldmatrix_position(i, j) == intrinsics.shared_16x16_to_ldmatrix_32x8_layout(i, j)
            assert list(accumulator_position(i, j)) == [int(x) for x in intrinsics.index_map_m16n8k8_matrixC([i, j])]


@needs_nvcc
@pytest.mark.slow
def test_mma_candidates_build_in_the_builders_own_workers(tensor_intrinsics):
    """A worker process never imports tensor_intrin, so nothing but the builder registers the mma
    lowering's index maps there (for m16n8k8 and m16n8k16 candidates alike); before it did, every mma candidate failed in the workers
    ("index_map_func.has_value()") while lowering in this process passed."""
    import tvm

    from ms_pruner.space import tuning_space

    mod = tvm.IRModule({"main": parse_workload("matmul:1024x1024x1024:float16:float32").prim_func()})
    _, target, generator = tuning_space("mma", mod, get_gpu_spec("h100").target())
    schedules = DesignSpace(mod, target, generator).sample(2, seed=3)
    assert sorted("m16n8k16" in str(s.trace) for s in schedules) == [False, True]  # both instructions
    results = _build(make_builder("pruner", max_workers=1), target, schedules)
    assert [r.error_msg for r in results] == [None, None]


def _build(builder, target, schedules):
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    return builder.build([BuilderInput(s.mod, target) for s in schedules])


@needs_nvcc
def test_artifact_holds_compiled_device_code(candidates):
    """The runner has nothing to compile: the packed CUDA module is cubin, not source."""
    target, schedules = candidates["h100"]
    ours = _build(make_builder("pruner", max_workers=2), target, schedules[:2])
    assert [r.error_msg for r in ours] == [None, None]
    for result in ours:
        assert device_module_formats(str(result.artifact_path)) == ["cubin"]
    if not cuda_runtime_loaded():  # without TVM's CUDA runtime, leaving it to TVM keeps the source
        source_only = _build(make_builder("pruner", max_workers=1, compile_device_code=False), target, schedules[:1])
        assert device_module_formats(str(source_only[0].artifact_path)) == ["cuda"]


@needs_nvcc
def test_the_builders_workers_take_the_cubins_the_search_compiled(candidates, monkeypatch):
    """A cubin the tuning process compiled (ptxas's tie order: ``cuda_source_compile``) is taken from
    the run's shared folder by the builder's worker processes instead of compiled again; with
    ``share_cubins=False`` they compile it, and the folder goes with the run. The stored cubin is
    swapped for a marker to tell the two apart (a GPU machine would load it: the test runs without)."""
    import glob
    import os

    from ms_pruner.builder import CUBIN_CACHE_ENV, cuda_sources, packed_device_code, run_cubin_cache
    from ms_pruner.builder.resources import cuda_source_compile

    if cuda_runtime_loaded():
        pytest.skip("TVM's CUDA runtime is loaded: code generation would load the marker as a cubin")
    target, schedules = candidates["h100"]
    marker = b"\x7fELF-marker-of-a-cubin-the-search-compiled"
    monkeypatch.delenv(CUBIN_CACHE_ENV, raising=False)
    with run_cubin_cache() as folder:
        (source,) = cuda_sources(schedules[0].mod, target, use_nvcc=False)
        cuda_source_compile(source, str(target.arch))
        (stored,) = glob.glob(os.path.join(folder, "*.cubin"))
        with open(stored, "wb") as handle:
            handle.write(marker)
        shared = _build(make_builder("pruner", max_workers=1), target, schedules[:1])
        apart = _build(make_builder("pruner", max_workers=1, share_cubins=False), target, schedules[:1])
    assert [r.error_msg for r in shared + apart] == [None, None]
    assert marker in packed_device_code(str(shared[0].artifact_path))
    apart_path = str(apart[0].artifact_path)
    assert marker not in packed_device_code(apart_path) and device_module_formats(apart_path) == ["cubin"]
    assert not os.path.exists(folder) and CUBIN_CACHE_ENV not in os.environ


def test_a_cubin_folder_the_user_names_is_kept_and_0_turns_sharing_off(tmp_path, monkeypatch):
    """``run_cubin_cache`` makes and removes a folder only where the environment names none: a folder
    named there is used and kept (a compile left in it is found again), ``0`` shares nothing."""
    from ms_pruner.builder import CUBIN_CACHE_ENV, run_cubin_cache
    from ms_pruner.builder.cubin_cache import store_compile, stored_compile

    monkeypatch.setenv(CUBIN_CACHE_ENV, str(tmp_path))
    with run_cubin_cache() as folder:
        store_compile(("nvcc", "source"), b"cubin", "report")
    assert folder == str(tmp_path) and stored_compile(("nvcc", "source")) == (b"cubin", "report")
    assert stored_compile(("nvcc", "other source")) is None
    monkeypatch.setenv(CUBIN_CACHE_ENV, "0")
    with run_cubin_cache() as folder:
        store_compile(("nvcc", "source 2"), b"cubin", "report")
        assert folder is None and stored_compile(("nvcc", "source")) is None
    assert len(list(tmp_path.iterdir())) == 2  # the first compile's cubin and report, nothing of the second


def test_blob_rewrite_keeps_the_function_table(candidates):
    from tvm.runtime import _ffi_api

    if cuda_runtime_loaded():
        pytest.skip("TVM's CUDA runtime is loaded: codegen compiles, no source module to rewrite")
    target, schedules = candidates["a100"]
    module = lower_candidate(schedules[0].mod, target).mod
    blob = bytes(_ffi_api.ModulePackImportsToTensor(module).numpy())
    parsed = ImportBlob.parse(blob)
    assert parsed.serialize() == blob
    source = module.imports[0].inspect_source("")
    rewritten = ImportBlob.parse(replace_cuda_sources(blob, {source: b"\x7fELF-not-a-real-cubin"}))
    (kind, payload), = [m for m in rewritten.modules if m[0] == "cuda"]
    (_, old_payload), = [m for m in parsed.modules if m[0] == "cuda"]
    assert payload.endswith(b"\x7fELF-not-a-real-cubin")
    table = old_payload[12 : len(old_payload) - 8 - len(source.encode())]
    assert table in payload and b"main_kernel" in table
    with pytest.raises(ValueError, match="not found"):
        replace_cuda_sources(blob, {"other source": b""})


def test_runner_arguments_are_filled_once_per_shape():
    import numpy as np
    import tvm

    from ms_pruner.builder import cached_alloc_argument, forget_cached_arguments

    matmul = [["TENSOR", "float32", [64, 32]], ["TENSOR", "float32", [32, 16]], ["TENSOR", "float32", [64, 16]]]
    forget_cached_arguments()
    first = cached_alloc_argument(tvm.cpu(0), matmul, 1)
    again = cached_alloc_argument(tvm.cpu(0), [list(info) for info in matmul], 1)
    assert again is first
    assert [tuple(a.shape) for a in first[0]] == [(64, 32), (32, 16), (64, 16)]
    values = first[0][0].numpy()
    assert np.isfinite(values).all() and np.abs(values).sum() > 0
    other = cached_alloc_argument(tvm.cpu(0), matmul[:2] + [["TENSOR", "float32", [64, 8]]], 1)
    assert other is not first and tuple(other[0][2].shape) == (64, 8)
    forget_cached_arguments()
    assert cached_alloc_argument(tvm.cpu(0), matmul, 1) is not first
