"""Build and export functions that run inside LocalBuilder's worker processes.

They are module-level functions of an importable module, so LocalBuilder pickles them by
reference. Unlike MetaSchedule's ``default_build`` they never import ``tvm.s_tir.tensor_intrin``:
a candidate reaching the builder is already tensorized (the intrinsic bodies are inlined in its
TIR), and that import costs ~23 s in every fresh worker.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Dict, Optional

# Environment switch read in the worker: "0" keeps CUDA as source (compiled by the runner at load).
COMPILE_DEVICE_CODE_ENV = "MS_PRUNER_COMPILE_DEVICE_CODE"


def build_pass_config(target) -> Dict[str, object]:
    """PassContext options under which every MetaSchedule CUDA candidate lowers.

    ``tirx.disable_storage_rewrite``: TVM 0.27's StorageRewrite merges the fp16 operand and fp32
    accumulator staging buffers of wmma candidates, and LowerIntrin then rejects the
    ``tvm_access_ptr`` whose element type no longer matches ("tvm_access_ptr element type must
    match the source buffer"). Shared-memory merging is a separate pass and stays on.
    """
    if target.kind.name == "cuda":
        return {"tirx.disable_storage_rewrite": True}
    return {}


def lower_candidate(mod, target):
    """Lower and code-generate one scheduled IRModule (no device compilation)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(opt_level=3, config=build_pass_config(target)):
        return tvm.compile(mod, target=target)


@dataclasses.dataclass
class BuiltCandidate:
    """What ``build_candidate`` hands to ``export_candidate`` inside the same worker."""

    executable: object
    cuda_binaries: Dict[str, bytes]


def _cuda_sources(executable):
    return [m for m in executable.mod.imports if m.kind == "cuda"]


def build_candidate(mod, target, _params: Optional[dict]) -> BuiltCandidate:
    """LocalBuilder ``f_build``: lower with the fixes above and, for CUDA, compile to cubin."""
    executable = lower_candidate(mod, target)
    binaries: Dict[str, bytes] = {}
    if target.kind.name == "cuda" and os.environ.get(COMPILE_DEVICE_CODE_ENV, "1") != "0":
        from .cuda_binary import compile_cuda_to_cubin

        for device_module in _cuda_sources(executable):
            source = device_module.inspect_source("")
            binaries[source] = compile_cuda_to_cubin(source, target)
    return BuiltCandidate(executable=executable, cuda_binaries=binaries)


def export_candidate(built: BuiltCandidate) -> str:
    """LocalBuilder ``f_export``: a tar artifact, with compiled device code when there is some."""
    from tvm.support.tar import tar

    from .cuda_binary import make_fpack_imports

    path = os.path.join(tempfile.mkdtemp(prefix="ms_pruner_"), "candidate.tar")
    fpack = make_fpack_imports(built.cuda_binaries) if built.cuda_binaries else None
    built.executable.export_library(path, fcompile=tar, fpack_imports=fpack)
    return path
