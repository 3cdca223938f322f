"""The build path of a GPU machine, checked on a machine without a GPU.

Where ``libcuda.so.1`` loads, TVM loads its CUDA runtime and code generation compiles CUDA itself,
in the builder, through ``tvm_callback_cuda_compile`` (``ms_pruner.builder.cuda_compile``). CI has
no GPU driver, so that path would never run here. A stand-in ``libcuda.so.1`` whose entry points
all return CUDA_ERROR_NO_DEVICE lets TVM load its real CUDA runtime: building, exporting and
loading a module call none of them, so TVM, our builder and nvcc run as on a GPU machine up to the
first kernel launch. On a machine with a real driver the test uses it instead.
"""

import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, needs_nvcc

PROBE = r"""
import importlib.util, json
import tvm
from ms_pruner.intrinsics import register_tensor_intrinsics
register_tensor_intrinsics()
from tvm.s_tir.meta_schedule.builder import BuilderInput
from ms_pruner.builder import build_pass_config, cuda_runtime_loaded, device_module_formats, make_builder
from ms_pruner.hardware import get_gpu_spec
from ms_pruner.search import DesignSpace
from ms_pruner.workloads import parse_workload

target = get_gpu_spec("h100").target()
schedules = DesignSpace(parse_workload("matmul:4096x4096x4096:float16:float32").prim_func(), target).sample(2, seed=5)
out = {"runtime": cuda_runtime_loaded(), "cuda_bindings": importlib.util.find_spec("cuda") is not None}
try:  # what the stock builder runs: TVM's own compile callback
    with tvm.transform.PassContext(opt_level=3, config=build_pass_config(target)):
        tvm.compile(schedules[0].mod, target=target)
    out["tvm_callback"] = "built"
except Exception as err:
    out["tvm_callback"] = " ".join(str(err).split())[-300:]
results = make_builder("pruner", max_workers=2).build([BuilderInput(s.mod, target) for s in schedules])
out["errors"] = [r.error_msg for r in results if r.error_msg]
paths = [str(r.artifact_path) for r in results if not r.error_msg]
out["formats"] = [device_module_formats(p) for p in paths]
out["loaded"] = [[m.kind for m in tvm.runtime.load_module(p).imports] for p in paths]
import tvm_ffi
from ms_pruner.builder.resources import cuda_source_compile
from ms_pruner.search.first_round.ptxas_ties import first_kernel_resources
callback = tvm_ffi.get_global_func("tvm_callback_cuda_compile", allow_missing=True)
compiled = []  # what the cold round's register check asks code generation to compile, if anything
import ms_pruner.builder.resources as resources
resources.cuda_source_compile = lambda source, arch: compiled.append(arch) or cuda_source_compile(source, arch)
reports = first_kernel_resources([s.mod for s in schedules], target, 2)
out["ptxas_registers"] = [r.registers if r is not None else None for r in reports]
out["ptxas_compiles"] = len(compiled)
after = tvm_ffi.get_global_func("tvm_callback_cuda_compile", allow_missing=True)
out["callback_restored"] = (after is None and callback is None) or bool(after is not None and after.same_as(callback))
print("PROBE " + json.dumps(out))
"""


def _runtime_cuda_library() -> str:
    import tvm

    found = glob.glob(os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime_cuda.so"))
    if not found:
        pytest.skip("this TVM wheel has no CUDA runtime library")
    return found[0]


def _driver_library_dir(tmp_path) -> str:
    """'' when a real libcuda.so.1 loads, else a directory holding the stand-in."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return ""
    except OSError:
        pass
    if shutil.which("nm") is None or shutil.which("gcc") is None:
        pytest.skip("nm and gcc are needed to make the stand-in driver library")
    listing = subprocess.run(["nm", "-D", "--undefined-only", _runtime_cuda_library()],
                             capture_output=True, text=True, check=True).stdout
    symbols = sorted({line.split()[-1] for line in listing.splitlines()
                      if line.split() and line.split()[-1].startswith("cu") and "@" not in line.split()[-1]})
    assert "cuModuleLoadData" in symbols
    source = tmp_path / "libcuda.c"
    source.write_text("".join(f"int {name}(void) {{ return 100; }}\n" for name in symbols))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(source)], check=True)
    return str(tmp_path)


@needs_nvcc
@pytest.mark.slow
def test_gpu_machine_build_path_ships_cubin(tmp_path, tensor_intrinsics):
    """With TVM's CUDA runtime loaded our builder compiles with nvcc and TVM loads the artifact,
    while TVM's own callback (NVRTC by default) fails unless cuda-bindings is installed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("TVM_CUDA_COMPILE_MODE", None)
    stub = _driver_library_dir(tmp_path)
    if stub:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [stub, os.environ.get("LD_LIBRARY_PATH")]))
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=900)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    probe = json.loads(line[len("PROBE "):])
    assert probe["runtime"], "TVM's CUDA runtime did not load"
    assert probe["errors"] == []
    assert probe["formats"] == [["cubin"], ["cubin"]]
    assert probe["loaded"] == [["cuda"], ["cuda"]]
    if not probe["cuda_bindings"]:
        assert "cuda-bindings" in probe["tvm_callback"], probe["tvm_callback"]
    # The cold round's register check (search/ptxas_ties.py) gets ptxas's report from the compile
    # code generation makes here, one per candidate, and leaves TVM's callback as it found it.
    assert all(isinstance(r, int) and 0 < r <= 255 for r in probe["ptxas_registers"]), probe["ptxas_registers"]
    assert probe["ptxas_compiles"] == 2 and probe["callback_restored"]
