import pytest

from ms_pruner.errors import UserError
from ms_pruner.hardware import (GPUS, GPUSpec, detect_cpu, get_gpu_spec, resolve_target, spec_for_target,
                                spec_from_device_name)


def test_required_gpus_are_described():
    for name in ["a100", "a100-80gb", "h100", "h100-pcie", "h200", "rtx3090", "rtx4090", "l4"]:
        spec = GPUS[name]
        assert spec.sm_count > 0 and spec.fp16_tensor_tflops >= spec.fp16_tensor_fp32acc_tflops > spec.fp32_tflops
        assert spec.l2_gbps > spec.dram_gbps > 0
        assert spec.smem_per_block_bytes <= spec.smem_per_sm_bytes
        assert spec.target().kind.name == "cuda"
        assert str(spec.target().attrs["arch"]) == spec.arch


def test_lookup_by_alias_tag_and_marketing_name():
    assert get_gpu_spec("H100") is GPUSpec.h100()
    assert get_gpu_spec("nvidia/nvidia-a100") is GPUSpec.a100()
    assert get_gpu_spec("geforce-rtx-4090").name == "rtx4090"
    assert get_gpu_spec("NVIDIA L4").name == "l4"
    with pytest.raises(UserError, match="unknown GPU 'v100'; known: "):
        get_gpu_spec("v100")


def test_detection_from_cuda_device_names():
    assert spec_from_device_name("NVIDIA H100 80GB HBM3").name == "h100"
    assert spec_from_device_name("NVIDIA H100 PCIe").name == "h100-pcie"
    assert spec_from_device_name("NVIDIA A100-SXM4-80GB").name == "a100-80gb"
    assert spec_from_device_name("NVIDIA GeForce RTX 3090").name == "rtx3090"
    assert spec_from_device_name("Tesla K80") is None


def test_h100_target_matches_the_tag_stock_metaschedule_uses():
    from tvm.target import Target

    import json

    ours = json.loads(str(GPUSpec.h100().target()))
    assert ours.pop("model") == "h100"
    assert ours == json.loads(str(Target("nvidia/nvidia-h100")))
    raised = GPUSpec.h100().target(max_shared_memory_per_block=160 * 1024)
    assert int(raised.attrs["max_shared_memory_per_block"]) == 160 * 1024
    with pytest.raises(UserError, match="opt-in limit"):
        GPUSpec.a100().target(max_shared_memory_per_block=200 * 1024)


def test_a_target_names_its_part_of_an_architecture():
    """H100 SXM, H100 PCIe and H200 share sm_90a (A100 40/80 GB sm_80, RTX 4090 and L4 sm_89) but not
    SM counts, clocks or bandwidths: each spec's target leads back to that spec, TVM's tags and bare
    targets to the part the tag describes."""
    from tvm.target import Target

    for name, spec in GPUS.items():
        assert spec_for_target(spec.target()) is spec, name
        assert spec_for_target(spec.target(max_shared_memory_per_block=spec.smem_per_block_bytes)) is spec, name
    assert spec_for_target(Target("nvidia/nvidia-h100")).name == "h100"
    assert spec_for_target(Target("nvidia/nvidia-a100")).name == "a100"
    assert spec_for_target(Target({"kind": "cuda", "arch": "sm_89"})).name == "rtx4090"
    assert spec_for_target(Target({"kind": "cuda", "arch": "sm_80", "model": "my-board"})).name == "a100"
    assert len({str(spec.target()) for spec in GPUS.values()}) == len(GPUS)


def test_resolve_target_without_device_requirement():
    choice = resolve_target("h100", require_device=False)
    assert choice.is_cuda and choice.gpu.name == "h100"
    pcie = resolve_target("h100-pcie", require_device=False)
    assert spec_for_target(pcie.target) is pcie.gpu is GPUS["h100-pcie"]
    cpu = resolve_target("llvm")
    assert cpu.target.kind.name == "llvm" and cpu.cpu.physical_cores >= 1
    with pytest.raises(UserError, match="--target is llvm"):
        resolve_target("llvm", gpu="h100")


def test_a_json_dict_target_is_completed_from_the_sheet_keeping_what_it_gives():
    """TVM 0.27 takes a target with options as a JSON dict only; a bare one lacks the limits MetaSchedule
    reads (max_threads_per_block ...), so the GPU's sheet fills them in."""
    a100 = resolve_target('{"kind": "cuda", "arch": "sm_80"}', require_device=False)
    assert a100.gpu is GPUS["a100"] and a100.target.attrs["max_threads_per_block"] == 1024
    assert dict(a100.target.export()) == dict(GPUS["a100"].target().export())
    opted_in = resolve_target({"kind": "cuda", "arch": "sm_90a", "max_shared_memory_per_block": 232448},
                              require_device=False)
    assert opted_in.gpu is GPUS["h100"] and opted_in.target.attrs["max_shared_memory_per_block"] == 232448
    named = resolve_target('{"kind": "cuda"}', gpu="h200", require_device=False)
    assert named.gpu is GPUS["h200"] and str(named.target.attrs["arch"]) == "sm_90a"
    a10g = resolve_target("nvidia/nvidia-a10g", require_device=False)  # a TVM tag we have no name for
    assert a10g.gpu is GPUS["rtx3090"] and str(a10g.target.attrs["arch"]) == "sm_86"
    assert spec_for_target(a10g.target) is a10g.gpu
    cpu = resolve_target('{"kind": "llvm", "mcpu": "x86-64-v2"}')
    assert str(cpu.target.attrs["mcpu"]) == "x86-64-v2" and int(cpu.target.attrs["num-cores"]) >= 1
    assert int(resolve_target({"kind": "llvm", "num-cores": 1}).target.attrs["num-cores"]) == 1


@pytest.mark.parametrize("target, gpu, message", [
    ("cuda -arch=sm_80", None, 'takes a target with options as a JSON dict, e.g. \'{"kind": "cuda"'),
    ('{"kind": "cuda", "arch": "sm_80"', None, "is not a JSON dict: "),
    ('{"kind": "cuda", "arch": "sm_80"}', "h100", "--gpu h100 is sm_90a, but --target"),
    ("h100", "a100", "--gpu a100 is sm_80, but --target h100 is for sm_90a"),
    ('{"kind": "cuda", "arch": "sm_90a", "max_shared_memory_per_block": 300000}', None, "exceeds the h100 opt-in"),
    ('{"kind": "cuda", "arch": "sm_80", "max_threads_per_block": "x"}', None, "'max_threads_per_block': expected"),
    ('{"kind": "rocm"}', None, "ms-pruner tunes llvm and cuda targets, not rocm"),
    ('{"kind": "llvm"}', "h100", "--gpu names a GPU but --target is llvm"),
    ('{"kind": "llvm", "mcpu": "no-such-cpu"}', None, "LLVM knows no CPU 'no-such-cpu' for "),
    ("v100", None, "unknown target 'v100': give llvm, cuda, auto, a GPU (a100, "),
])
def test_a_target_that_cannot_be_tuned_is_one_line(target, gpu, message):
    with pytest.raises(UserError) as raised:
        resolve_target(target, gpu, require_device=False)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_detect_cpu_is_sane():
    cpu = detect_cpu()
    assert cpu.simd_bytes in (16, 32, 64)
    assert cpu.fp32_gflops() > 0 and cpu.l1d_bytes < cpu.l2_bytes


def test_an_architecture_without_a_sheet_gets_the_nearest_with_one_warning_line(caplog):
    from tvm.target import Target

    with caplog.at_level("WARNING", logger="ms_pruner"):
        assert spec_for_target(Target({"kind": "cuda", "arch": "sm_75"})).name == "a100"
        assert spec_for_target(Target({"kind": "cuda", "arch": "sm_75"})).name == "a100"
        assert spec_for_target(Target({"kind": "cuda", "arch": "sm_100"})).name == "h100"
        assert spec_for_target(Target({"kind": "cuda", "arch": "sm_90"})).name == "h100"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["ms-pruner: warning: no GPU sheet for sm_75; the analyzer uses a100's (sm_80), the nearest "
                     "compute capability",
                     "ms-pruner: warning: no GPU sheet for sm_100; the analyzer uses h100's (sm_90a), the nearest "
                     "compute capability"]
    with pytest.raises(UserError, match="has no sm_XY arch"):
        spec_for_target(Target("llvm"))


def test_a_spec_with_changed_fields_reads_back_from_its_target():
    """``NAME:FIELD=VALUE,...`` changes numeric figures (an analyzer ablation); the name spells the
    changes, so a tuning target built from it leads back to the changed spec, not the datasheet."""
    changed = get_gpu_spec("H100:warp_mma_share=1, l2_latency_cycles=300")
    assert changed.name == "h100:l2_latency_cycles=300,warp_mma_share=1.0"
    assert (changed.warp_mma_share, changed.l2_latency_cycles) == (1.0, 300)
    assert changed.sm_count == GPUS["h100"].sm_count and changed != GPUS["h100"]
    assert spec_for_target(changed.target()) == changed
    choice = resolve_target("cuda", gpu="h100:warp_mma_share=1", require_device=False)
    assert spec_for_target(choice.target) == choice.gpu == get_gpu_spec("h100:warp_mma_share=1.0")
    assert get_gpu_spec("a100:") is GPUS["a100"]
    for wrong, message in [("h100:notes=x", "GPU field 'notes' cannot be changed; numeric fields: "),
                           ("h100:sm_count=1.5", "GPU field sm_count takes an integer, not '1.5'"),
                           ("h100:warp_mma_share=nan", "must be finite and above 0"),
                           ("h100:l2_gbps=0", "must be finite and above 0"),
                           ("v100:sm_count=80", "unknown GPU 'v100'")]:
        with pytest.raises(UserError, match=message) as raised:
            get_gpu_spec(wrong)
        assert "\n" not in str(raised.value)


def test_hopper_warp_mma_peak_is_the_measured_mma_sync_ceiling():
    """Hopper's datasheet tensor peak is wgmma's; the analyzer's rate for the mma.sync and WMMA
    kernels MetaSchedule emits is what back-to-back mma.sync reached on an H200 (same SM as the H100)."""
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "h200", "mma_ceiling.json")
    with open(path, encoding="utf-8") as handle:
        ceiling = json.load(handle)
    for name in ("h100", "h200"):
        spec = GPUS[name]
        for k, accumulate, measured in [(16, "float32", "m16n8k16_f32_tflops"), (8, "float32", "m16n8k8_f32_tflops"),
                                        (16, "float16", "m16n8k16_f16_tflops")]:
            reached = spec.tensor_tflops(accumulate) * spec.mma_peak_share(k)
            assert reached == pytest.approx(ceiling[measured], rel=0.01), (name, measured)
    assert GPUS["a100"].mma_peak_share(16) == 1.0
    assert get_gpu_spec("h100:warp_mma_share=1").mma_peak_share(16) == 1.0
