"""Who compiles CUDA source, on a machine with a GPU and on one without.

TVM 0.27's ``target.build.cuda`` hands the generated source to ``ffi.Module.create.cuda``:

- Without TVM's CUDA runtime (``libtvm_runtime_cuda.so`` needs ``libcuda.so.1``, so: no GPU
  driver) that is a fallback module that only carries the source; ``worker.build_candidate``
  compiles it with nvcc and packs the cubin itself (``cuda_binary``).
- With the runtime loaded (any GPU machine) it is a real CUDA module, which compiles the source
  at once, *in the builder*, through the global ``tvm_callback_cuda_compile``. TVM's own callback
  defaults to NVRTC, which needs the ``cuda-bindings`` package: without it every build fails
  with "Failed to compile CUDA with NVRTC because the `cuda-bindings` package is not available".
  The callback gets no target either (``Target.current()`` is None during codegen), so TVM's nvcc
  mode compiles for whatever GPU 0 is.

Both were observed on this project's CPU machine with TVM's real CUDA runtime loaded against a
driver library that has no GPU behind it (``tests/test_builder_gpu_path.py``). So for CUDA we
register :func:`compile_with_nvcc` as that callback (unless the user chose TVM's compiler with
``TVM_CUDA_COMPILE_MODE``) and compile under ``with target`` so the arch is the target's.
"""

from __future__ import annotations

import contextlib
import os

import tvm_ffi
from tvm.support import nvcc

from .cuda_source_fix import register_cuda_source_fix
from .ptxas import recent_cubin, sm_arch

COMPILE_MODE_ENV = "TVM_CUDA_COMPILE_MODE"
CALLBACK_NAME = "tvm_callback_cuda_compile"


def cuda_runtime_loaded() -> bool:
    """Whether TVM's CUDA runtime is loaded, i.e. codegen compiles CUDA itself via the callback."""
    return tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is not None


def compile_with_nvcc(source: str, *_unused) -> bytes:
    """CUDA source to a cubin with nvcc (TVM's flags) for the current target's arch, else GPU 0's;
    a source this process has just compiled for that arch (the parity unroll's trial) is not compiled again."""
    arch = sm_arch()
    cubin = recent_cubin(source, arch) if arch else None
    return cubin if cubin is not None else bytes(nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc"))


@contextlib.contextmanager
def compile_callback(func):
    """``func`` as TVM's CUDA compile callback while open, the callback before it put back on exit."""
    previous = tvm_ffi.get_global_func(CALLBACK_NAME, allow_missing=True)
    tvm_ffi.register_global_func(CALLBACK_NAME, func, override=True)
    try:
        yield
    finally:
        if previous is not None:
            tvm_ffi.register_global_func(CALLBACK_NAME, previous, override=True)
        else:
            tvm_ffi.remove_global_func(CALLBACK_NAME)


@contextlib.contextmanager
def cuda_compile_scope(target, use_nvcc: bool = True):
    """Context for ``tvm.compile``/``compile_relax``: for a CUDA target, the target as
    ``Target.current()`` (the arch the callback compiles for) and, with ``use_nvcc``, our callback
    (``compile_callback``), unless ``TVM_CUDA_COMPILE_MODE`` (``nvrtc`` with cuda-bindings installed,
    or ``nvcc``) chose TVM's own; and the fix to TVM's CUDA source (``cuda_source_fix``) registered.
    A no-op for other targets."""
    if target.kind.name != "cuda":
        yield
        return
    register_cuda_source_fix()
    with contextlib.ExitStack() as stack:
        if use_nvcc and not os.environ.get(COMPILE_MODE_ENV):
            stack.enter_context(compile_callback(compile_with_nvcc))
        with target:
            yield
