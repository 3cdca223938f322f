"""GEMMs with a fused epilogue (bias, ReLU) on the mma family, and two fixes its candidates needed:
TVM's CUDA source for eight-lane vectors, and the analyzer's merge of shared buffers (no GPU)."""

import shutil
import subprocess

import pytest

from conftest import needs_nvcc, workload_space

EPILOGUE_GEMMS = ("dense_bias:2048x3072x768:float16:float32", "dense_bias_relu:2048x3072x768:float16:float16")


@pytest.mark.parametrize("spec", EPILOGUE_GEMMS)
@pytest.mark.parametrize("fused", [True, False])
def test_a_fused_epilogue_gemm_samples_mma_candidates_the_analyzer_reads_exactly(tensor_intrinsics, monkeypatch, spec,
                                                                                 fused):
    """Before EpilogueAfterFragmentStore no mma draw of these GEMMs was valid (TVM's
    auto copy of the fragments took the inlined bias: "Multiple buffer read"). Now the draws lower
    as one kernel, the GEMM's storing the epilogue's result from its registers (builder/fused_epilogue.py),
    or with ``MS_PRUNER_FUSE_EPILOGUE=0`` as two, the GEMM's and a 32-thread epilogue; either way the
    analyzer reads the kernels that are built and predicts the GEMM's shared memory to the byte (its
    result tile, where it stages one, reuses the freed operand tiles)."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder.resources import allocated_shared_bytes
    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.space import sketch_family

    monkeypatch.setenv("MS_PRUNER_FUSE_EPILOGUE", "1" if fused else "0")
    _, target, space = workload_space(spec, "mma")
    assert {sketch_family(s) for s in space.sketches} == {"mma"}
    verdicts = {}
    schedules = space.sample(3, seed=0, max_attempts=200, verdicts=verdicts)
    assert len(schedules) == 3, verdicts
    analyzer = StaticAnalyzer.for_target(target)
    for sch in schedules:
        features = analyzer.estimate(sch).features
        lowered = lowered_tir(sch.mod, target)
        kernels = [gvar.name_hint for gvar in lowered.functions if "_kernel" in gvar.name_hint]
        assert len(kernels) == len(features) == (1 if fused else 2)
        assert [f.threads_per_block for f in features][1:] == ([] if fused else [32])
        assert allocated_shared_bytes(lowered) == [int(features[0].smem_per_block)]


@pytest.mark.parametrize("spec", EPILOGUE_GEMMS)
def test_the_fused_epilogue_computes_the_workload_and_saves_the_second_pass(tensor_intrinsics, spec):
    """The GEMM kernel that writes the bias (and ReLU) itself computes what the two kernels did, in
    the emulator against the exact result, and the analyzer no longer charges the epilogue kernel's
    pass over the output: its estimate is the GEMM kernel's alone."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.emulator import EmulatedChecker
    from ms_pruner.workloads import parse_workload

    _, target, space = workload_space(spec, "mma")
    (sch,) = space.sample(1, seed=2, max_attempts=200)
    check = EmulatedChecker(parse_workload(spec), target).check(sch.mod)
    assert check.status == "right", check.as_json()
    fused = StaticAnalyzer.for_target(target).estimate(sch)
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as patch:
        patch.setenv("MS_PRUNER_FUSE_EPILOGUE", "0")
        apart = StaticAnalyzer.for_target(target).estimate(sch)
    assert len(fused.kernels) == 1 and len(apart.kernels) == 2
    assert fused.latency_s < apart.latency_s
    assert fused.latency_s == pytest.approx(apart.kernels[0].latency_s, rel=0.02)


@needs_nvcc
def test_a_fused_epilogue_gemm_builds_on_the_mma_family(tensor_intrinsics):
    from ms_pruner.evaluation.space_report import build_report

    _, target, space = workload_space(EPILOGUE_GEMMS[0], "mma")
    (sch,) = space.sample(1, seed=1, max_attempts=200)
    report = build_report(sch, target)
    assert report["status"] == "built", report.get("error")
    assert report["sass"]["HMMA"] > 0 and report["sass"]["LDGSTS"] > 0


def test_shared_buffers_merge_as_tvms_allocator_places_them():
    """The result tile is allocated after the operand tiles are freed: in a freed tile at least as
    large (and at most 16 times larger), else over the largest smaller ones, else beside them."""
    from ms_pruner.analysis.shared_allocation import merged_shared_bytes

    assert merged_shared_bytes({"A": 8192, "B": 65536}, {"C": 4096}) == 8192 + 65536  # in A's place
    assert merged_shared_bytes({"A": 8192, "B": 65536}, {"C": 131072}) == 131072  # over A and B
    assert merged_shared_bytes({"A": 32768, "B": 98304}, {"C": 65536}) == 32768 + 98304  # in B's place
    assert merged_shared_bytes({"A": 65536, "B": 65536}, {"C": 100000}) == 131072  # over both
    assert merged_shared_bytes({"A": 4096, "B": 2 ** 21}, {"C": 65536}) == 2 ** 21 + 65536  # over A, B too large
    assert merged_shared_bytes({"A": 2 ** 20}, {"C": 1024}) == 2 ** 20 + 1024  # beside: A is too large
    assert merged_shared_bytes({}, {"C": 1024}) == 1024


EIGHT_LANES = """
#include <cuda_fp16.h>
extern "C" __global__ void k(int* out, half* in, int t) {
  longlong4 v_ = make_longlong4((t % 48), (t % 48) + 1, (t / 3), 3, 4, 5, 6, (t * (2 + 1)));
  longlong4 w_ = make_longlong4(1, 2, 3, 4);
  uint4 h_ = make_uint4(in[t], in[t + 1], in[2], in[3], in[4], in[5], in[6], in[(t % (5))]);
  out[0] = ((int2*)(&(v_.y)))->y + ((int2*)(&(w_.x)))->x;
  out[1] = __half2int_rn(((half2*)(&(h_.w)))->y);
}
"""


def test_eight_lane_vectors_are_built_lane_pair_by_lane_pair():
    from ms_pruner.builder.cuda_source_fix import fix_eight_lane_vectors

    fixed = fix_eight_lane_vectors(EIGHT_LANES)
    assert "tvm_ms_pruner_int32x8((t % 48), (t % 48) + 1, (t / 3), 3, 4, 5, 6, (t * (2 + 1)))" in fixed
    assert "make_longlong4(1, 2, 3, 4)" in fixed  # four values: TVM's call was right
    assert "tvm_ms_pruner_half8(in[t], in[t + 1]," in fixed
    assert fixed.index("tvm_ms_pruner_half8(half a") < fixed.index('extern "C" __global__')
    assert fix_eight_lane_vectors(fixed) == fixed


@needs_nvcc
def test_eight_lane_vectors_compile_once_fixed(tmp_path):
    from ms_pruner.builder.cuda_source_fix import fix_eight_lane_vectors

    def compiles(source):
        path = tmp_path / "k.cu"
        path.write_text(source)
        command = ["nvcc", "--cubin", "-arch=sm_80", str(path), "-o", str(tmp_path / "k.cubin")]
        return subprocess.run(command, capture_output=True, text=True).returncode == 0

    assert shutil.which("nvcc")
    assert not compiles(EIGHT_LANES)  # TVM's source as it comes
    assert compiles(fix_eight_lane_vectors(EIGHT_LANES))


def test_a_reduction_after_the_gemm_is_left_to_autoinline(tensor_intrinsics):
    """Only an elementwise consumer becomes the epilogue kernel: a row sum of the GEMM's result (a
    reduction, whose loops the epilogue's fuse and bind cannot take) is left to AutoInline, and the
    design space is made (an error in the rule would end it, and tuning with it)."""
    import tvm
    from tvm import te

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search.space import DesignSpace
    from ms_pruner.space import sketch_family, tuning_space

    a = te.placeholder((1024, 1024), "float16", name="A")
    b = te.placeholder((1024, 1024), "float16", name="B")
    k = te.reduce_axis((0, 1024), name="k")
    c = te.compute((1024, 1024), lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k), name="C")
    r = te.reduce_axis((0, 1024), name="r")
    rows = te.compute((1024,), lambda i: te.sum(c[i, r], axis=r), name="rows")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, rows])})
    _, target, generator = tuning_space("mma", mod, get_gpu_spec("h100").target())
    space = DesignSpace(mod, target, space=generator)
    assert "mma" in {sketch_family(s) for s in space.sketches}
    assert not any(_epilogue_split(inst) for s in space.sketches for inst in s.insts)
    gemm_then_add = workload_space(EPILOGUE_GEMMS[0], "mma")[2]  # the control: there the split is made
    assert any(_epilogue_split(inst) for s in gemm_then_add.sketches for inst in s.insts)


def _epilogue_split(inst) -> bool:
    """Whether ``inst`` is the epilogue kernel's split of its loops into blocks, 32 lanes and 4-vectors."""
    if inst.kind.name != "Split":
        return False
    factors = [getattr(x, "value", None) for x in inst.inputs[1:]]
    return factors[-2:] == [32, 4]
