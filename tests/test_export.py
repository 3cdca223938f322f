"""``ms-pruner export``: a work dir's best kernel as a library built as it was measured, loaded and
run with TVM's runtime alone."""

import os

import numpy as np
import pytest
import tvm

from conftest import H100_MM4096, REPO_ROOT, needs_h100_data, needs_nvcc
from ms_pruner.cli import main

CPU_RUN = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32")


def test_the_best_cpu_kernel_is_exported_loaded_and_right(tmp_path, capsys):
    library, code = str(tmp_path / "lib" / "matmul.so"), str(tmp_path / "matmul.ll")
    assert main(["export", "--work-dir", CPU_RUN, "--out", library, "--source", code]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {library}: the best of C(128x128:float32, 128x128:float32, 128x128:float32) on "
                          "llvm, 117.3 us measured;") and f"load_module('{library}')['main'](*buffers)" in out
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 128), dtype=np.float32), rng.standard_normal((128, 128), dtype=np.float32)
    c = tvm.runtime.tensor(np.zeros((128, 128), dtype=np.float32))
    tvm.runtime.load_module(library)["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert "define" in open(code).read()
    import ms_pruner

    kernel = ms_pruner.export_best(CPU_RUN, str(tmp_path / "matmul.tar"))  # a .tar: to link into a program of one's own
    assert (kernel.function, kernel.target, kernel.instruction) == ("main", "llvm", None) and kernel.latency_s > 0
    assert os.path.getsize(kernel.path) > 0


@needs_nvcc
@needs_h100_data
def test_the_best_h100_kernel_is_exported_with_its_cubin_here(tmp_path, capsys):
    """No GPU needed: the CUDA the builder generated, and the cubin nvcc made of it for sm_90a,
    packed into the library (a GPU machine loads it as it is)."""
    library, code = str(tmp_path / "mm.so"), str(tmp_path / "mm.cu")
    assert main(["export", "--work-dir", H100_MM4096, "--out", library, "--source", code]) == 0
    assert "the best (wmma) of C(4096x4096:float16, 4096x4096:float16, 4096x4096:float32) on cuda sm_90a" in \
        capsys.readouterr().out
    assert "wmma::mma_sync" in open(code).read()
    packed = open(library, "rb").read()
    assert b"\x7fELF" in packed[4:] and b"cubin" in packed  # the device module's format and its binary


@pytest.mark.parametrize("options, message", [
    (["--workload", "matmul:64x64x64"], f"'{CPU_RUN}' holds no record of matmul:64x64x64"),
    (["--workload", "matmul:8x8"], "bad matmul dims '8x8'"),
    (["--out", "k.bin"], "--out k.bin: name a .so (loaded with tvm.runtime.load_module) or a .tar"),
])
def test_an_export_that_cannot_be_made_is_one_line(tmp_path, capsys, options, message):
    assert main(["export", "--work-dir", CPU_RUN, "--out", str(tmp_path / "k.so"), *options]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "k.so").exists()
