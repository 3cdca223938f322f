import numpy as np
import pytest
import tvm

from conftest import KERNEL_FILE
from ms_pruner.errors import UserError
from ms_pruner.workloads import KINDS, SUITES, KernelFile, get_suite, parse_workload, tuned_workload


def test_spec_round_trip_and_defaults():
    w = parse_workload("matmul:4096x4096x4096:float16:float32")
    assert (w.kind, w.dims, w.in_dtype, w.out_dtype) == ("matmul", (4096, 4096, 4096), "float16", "float32")
    assert w.spec == "matmul:4096x4096x4096:float16:float32"
    assert w.flops == 2 * 4096**3
    conv = parse_workload("conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32")
    assert conv.dims == (16, 56, 56, 64, 64, 3, 1, 1)
    assert conv.spec == "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32"
    assert conv.flops == 2 * 16 * 56 * 56 * 64 * 64 * 9
    assert parse_workload("matmul:8x8x8").out_dtype == "float32"
    assert parse_workload("matmul:8x8x8:float16").out_dtype == "float16"


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("gemm:8x8x8", "unknown workload 'gemm:8x8x8'; valid forms: matmul:"),
        ("matmul:8x8", "expected MxNxK"),
        ("matmul:8x8x0", "positive"),
        ("conv2d_nhwc:1x8x8x4x4", "expected NxHxWxCIxCOkKsSpP"),
        ("matmul:8x8x8:int8", "unsupported input dtype 'int8'"),
        ("matmul:8x8x8:float16:bfloat16", "unsupported output dtype 'bfloat16'"),
        ("matmul:8x8x8:float32:float16", "unsupported dtype pair"),
    ],
)
def test_bad_specs_name_the_problem(spec, fragment):
    with pytest.raises(UserError) as info:
        parse_workload(spec)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_suites_parse():
    for name in SUITES:
        workloads = get_suite(name)
        assert workloads
    assert len(get_suite("resnet50-convs")) >= 20
    tensorcore = get_suite("tensorcore")
    assert len(tensorcore) >= 8 and all(w.in_dtype == "float16" for w in tensorcore)
    assert len({w.kind for w in tensorcore}) >= 5 and {w.out_dtype for w in tensorcore} == {"float16", "float32"}
    with pytest.raises(UserError, match="unknown suite"):
        get_suite("nope")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_computes_its_reference_on_llvm(kind):
    """Each definition, compiled unscheduled on llvm, equals its numpy reference."""
    import tvm

    dims = {"conv2d_nhwc": "1x6x6x4x5k3s2p1", "batch_matmul": "2x5x6x7"}.get(kind, "5x6x7")
    w = parse_workload(f"{kind}:{dims}:float32:float32")
    lib = tvm.compile(w.prim_func(), target="llvm")
    inputs = w.random_inputs(seed=3)
    out = tvm.runtime.tensor(np.zeros(w.output_shape(), dtype=w.out_dtype))
    lib(*[tvm.runtime.tensor(x) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), w.reference(inputs), rtol=1e-5, atol=1e-5)


def test_matmul_matches_metaschedule_te_workload():
    """Same structure as MetaSchedule's own helper, so databases tuned with it are reusable."""
    import tvm_ffi
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    ours = parse_workload("matmul:256x128x64:float16:float32").prim_func()
    theirs = te.create_prim_func(te_workload.matmul(256, 128, 64, "float16", "float32"))
    assert tvm_ffi.structural_equal(ours, theirs)
    ours = parse_workload("conv2d_nhwc:1x14x14x32x64k3s1p1:float16:float32").prim_func()
    theirs = te.create_prim_func(te_workload.conv2d_nhwc(1, 14, 14, 32, 64, 3, 1, 1, in_dtype="float16",
                                                         out_dtype="float32"))
    assert tvm_ffi.structural_equal(ours, theirs)


@pytest.mark.parametrize("spec", ["matmul_nt:16x24x8:float32:float32", "dense_bias_relu:16x24x8:float32:float32",
                                  "batch_matmul:2x8x16x8:float32:float32",
                                  "conv2d_nhwc:2x9x9x4x8k3s2p1:float32:float32"])
def test_torch_reference_computes_the_workload(spec):
    """The op that compare times as the torch/cuBLAS/cuDNN reference is the workload's computation."""
    from ms_pruner.tuning.reference import reference_latency, torch_operation

    workload = parse_workload(spec)
    inputs = workload.random_inputs(seed=1)
    what, run, to_workload_layout = torch_operation(workload, inputs, "cpu")
    out = to_workload_layout(run()).numpy()
    assert out.shape == workload.output_shape()
    np.testing.assert_allclose(out, workload.reference(inputs), rtol=1e-4, atol=1e-4)
    timed = reference_latency(workload, on_gpu=False)
    assert timed["what"] == what and timed["latency_s"] > 0


def test_a_kernel_file_gives_its_prim_func_or_module_as_written(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNEL_FILE)
    direct, built = tuned_workload(f"{path}:matmul"), tuned_workload(f"{path}:built")
    assert isinstance(direct, KernelFile) and direct.spec == "kernels:matmul"
    tvm.ir.assert_structural_equal(direct.prim_func(), built.prim_func()["mm"])
    # TVMScript's @I.ir_module class reads its source through sys.modules: the file is imported as import would
    scale = tuned_workload(f"{path}:Module")
    assert [g.name_hint for g in scale.prim_func().functions] == ["scale"] and scale.flops == 64
    assert direct.flops == built.flops == 2 * 64 ** 3
    assert tuned_workload("matmul:8x8x8").spec == "matmul:8x8x8:float32:float32"


RELAX_MODULE = """
from tvm.script import ir as I, relax as R


@I.ir_module
class Net:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return x
"""


@pytest.mark.parametrize("name, source, message", [
    ("matmul", None, "no file '"),
    ("Net", RELAX_MODULE, "'Net' is a Relax module; a whole model is tuned with 'ms-pruner tune-model --model "),
    ("nothing", KERNEL_FILE, "kernels.py' defines no 'nothing'"),
    ("count", KERNEL_FILE, "'count' is of type int, not a PrimFunc, an IRModule of one, or a function returning one"),
    ("two", KERNEL_FILE, "tune takes an IRModule of one PrimFunc, not of 2 functions"),
    ("fails", KERNEL_FILE, "fails() failed: ValueError: no shapes here"),
    ("matmul", KERNEL_FILE.replace("(s_tir=True)", ""),
     "kernels.py' failed: DiagnosticError: error: Program is not well-formed"),
])
def test_a_kernel_file_that_gives_no_kernel_is_one_line(tmp_path, name, source, message):
    path = tmp_path / "kernels.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(UserError) as raised:
        tuned_workload(f"{path}:{name}")
    assert str(raised.value).startswith(f"tune {path}:{name}: ") and message in str(raised.value)
    assert "\n" not in str(raised.value)
