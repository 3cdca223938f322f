"""Build and export functions that run inside LocalBuilder's worker processes.

They are module-level functions of an importable module, so LocalBuilder pickles them by
reference. Unlike MetaSchedule's ``default_build`` they never import ``tvm.s_tir.tensor_intrin``:
a candidate reaching the builder is already tensorized (the intrinsic bodies are inlined in its
TIR), and that import costs ~23 s in every fresh worker. The two index maps the mma rule's lowering
looks up by name, which that import would register, are registered by mma_layouts.py instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from typing import Dict, List, Optional

import tvm
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
from tvm.support.tar import tar

from ..errors import UserError
from .cuda_binary import compile_cuda_to_cubin, import_tree, make_fpack_imports
from .copy_lanes import prepare_permuted_copies
from .cuda_compile import cuda_compile_scope, cuda_runtime_loaded
from .fused_epilogue import fuse_fragment_epilogues
from .mma_layouts import register_mma_layouts
from .odd_lanes import unroll_odd_half_vectors
from .wait_counts import PRUNER_TIR_PIPELINE, register_pruner_pipeline

# Environment switch read in the worker: "0" leaves CUDA compilation to TVM (see build_candidate).
COMPILE_DEVICE_CODE_ENV = "MS_PRUNER_COMPILE_DEVICE_CODE"
VECTOR_LET_CHECK = "eval_vec_"  # ThreadSync's check on a vector index (``_with_cse_fallback``)


def build_pass_config(target) -> Dict[str, object]:
    """PassContext options under which every MetaSchedule CUDA candidate lowers.

    ``tirx.disable_storage_rewrite``: TVM 0.27's StorageRewrite merges the fp16 operand and fp32
    accumulator staging buffers of wmma candidates, and LowerIntrin then rejects the
    ``tvm_access_ptr`` whose element type no longer matches ("tvm_access_ptr element type must
    match the source buffer"). Shared-memory merging is a separate pass and stays on.

    ``tirx.use_async_copy``: the global->shared copies of a software pipeline's asynchronous stages
    (the mma rule's, ms_pruner.space) become cp.async (LDGSTS in SASS) instead of a load to
    registers and a store; without it the pipeline's copies stay synchronous. Copies outside an
    asynchronous stage (every WMMA candidate's) are left as they are.
    """
    if target.kind.name == "cuda":
        return {"tirx.disable_storage_rewrite": True, "tirx.use_async_copy": 1}
    return {}


def lower_candidate(mod, target, use_nvcc: bool = True):
    """Lower and code-generate one scheduled IRModule.

    Where TVM's CUDA runtime is loaded (a GPU machine) code generation also compiles the CUDA
    source, with nvcc for the target's arch (``cuda_compile``), or with TVM's own compiler when
    ``use_nvcc`` is False; elsewhere the device code stays source.
    """
    mod = _ready_to_lower(mod)

    def lower(context):
        with context, cuda_compile_scope(target, use_nvcc):
            return tvm.compile(mod, target=target, tir_pipeline=PRUNER_TIR_PIPELINE)

    return _with_cse_fallback(lower, target)


def lowered_tir(mod, target):
    """``mod`` through TVM's TIR pipeline for ``target`` as ``lower_candidate`` lowers it, stopping
    before host and device are split and code is generated: what decides the kernel, for less."""
    mod = _ready_to_lower(mod)
    host = target.host or tvm.target.Target("llvm" if tvm.runtime.enabled("llvm") else "c")

    def lower(context):
        with context:
            pipeline, _, _ = tvm.tirx.get_tir_pipeline(PRUNER_TIR_PIPELINE)
            return pipeline(tvm.tirx.transform.BindTarget(target.with_host(host))(mod))

    return _with_cse_fallback(lower, target)


def _ready_to_lower(mod):
    """``mod`` without MetaSchedule's weight-layout rewrite blocks and rewritten as the builder
    lowers it (``rewritten_schedule``); also registers the mma index maps lowering looks up
    (mma_layouts.py) and the pipeline it lowers with (wait_counts.py), since every lowering here
    starts with this."""
    register_mma_layouts()
    register_pruner_pipeline()
    return rewritten_schedule(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod))


def rewritten_schedule(mod):
    """A scheduled module as the builder hands it to TVM's lowering: its swizzled copies split by
    chunk (copy_lanes.py), its mma epilogue kernels fused into their GEMMs (fused_epilogue.py), its
    vector loops of an odd number of fp16 lanes unrolled (odd_lanes.py). ``tune-model`` compiles the
    tuned model through the same rewrite."""
    return unroll_odd_half_vectors(fuse_fragment_epilogues(prepare_permuted_copies(mod)))


def _pass_context(target, options: Optional[dict] = None):
    return tvm.transform.PassContext(opt_level=3, config={**build_pass_config(target), **(options or {})})


def _with_cse_fallback(lower, target):
    """``lower(pass_context)``, again without TIR's common-subexpression elimination where it left
    ThreadSync a vector index it cannot read. A copy whose vector lanes cross a row of its tile (a
    WMMA write-back 3 lanes wide over 16-column fragments, as the rule samples) has an index that is
    no ramp; CommonSubexprElim binds its parts to vector-typed lets, and ThreadSync then stops with
    "Check failed: (eval_vec_)". Without the pass the copy lowers as gathered lanes; nvcc eliminates
    common subexpressions itself. Only a candidate the first lowering rejects is lowered twice."""
    try:
        return lower(_pass_context(target))
    except Exception as err:  # pylint: disable=broad-except
        if VECTOR_LET_CHECK not in str(err):
            raise
    return lower(_pass_context(target, {"tirx.disable_cse_tir": True}))


@dataclasses.dataclass
class BuiltCandidate:
    """What ``build_candidate`` hands to ``export_candidate`` inside the same worker."""

    executable: object
    cuda_binaries: Dict[str, bytes]


def cuda_modules(module) -> list:
    """The CUDA modules of ``module``'s import tree (a Relax VM executable holds them a level down)."""
    return [m for m in import_tree(module) if m.kind == "cuda"]


def with_device_code(executable, target) -> BuiltCandidate:
    """``executable`` as ``export_candidate`` packs it: where code generation left CUDA source (no
    CUDA runtime in this process), each source compiled here with nvcc for the target's arch."""
    binaries: Dict[str, bytes] = {}
    if target.kind.name == "cuda" and not cuda_runtime_loaded():
        for device_module in cuda_modules(executable.mod):
            source = device_module.inspect_source("")
            binaries[source] = compile_cuda_to_cubin(source, target)
    return BuiltCandidate(executable=executable, cuda_binaries=binaries)


def cuda_sources(mod, target, use_nvcc: bool = True) -> List[str]:
    """The CUDA source of each device module of a scheduled IRModule, lowered as the builder lowers
    it (``lower_candidate``), for reading what code generation emits: load widths, address
    arithmetic, ptxas's report."""
    return [m.inspect_source("") for m in cuda_modules(lower_candidate(mod, target, use_nvcc).mod)]


def build_candidate(mod, target, _params: Optional[dict]) -> BuiltCandidate:
    """LocalBuilder ``f_build``: lower with the fixes above and, for CUDA, compile to cubin.

    On a GPU machine code generation has compiled the device code already (``lower_candidate``);
    without TVM's CUDA runtime it is source, compiled here and packed by ``export_candidate``.
    With ``MS_PRUNER_COMPILE_DEVICE_CODE=0`` TVM compiles on a GPU machine (NVRTC by default) and
    the artifact keeps the source elsewhere (compiled by the runner at load).
    """
    ours = os.environ.get(COMPILE_DEVICE_CODE_ENV, "1") != "0"
    executable = lower_candidate(mod, target, use_nvcc=ours)
    return with_device_code(executable, target) if ours else BuiltCandidate(executable=executable, cuda_binaries={})


def export_candidate(built: BuiltCandidate) -> str:
    """LocalBuilder ``f_export``: a tar artifact, with compiled device code when there is some."""
    path = os.path.join(tempfile.mkdtemp(prefix="ms_pruner_"), "candidate.tar")
    fpack = make_fpack_imports(built.cuda_binaries) if built.cuda_binaries else None
    built.executable.export_library(path, fcompile=tar, fpack_imports=fpack)
    return path


def write_library(built: BuiltCandidate, path: str) -> None:
    """``built`` as the library ``path`` (``.so``, or ``.tar`` to link elsewhere), its device code
    packed as compiled here, so the machine that loads it needs no nvcc."""
    fpack = make_fpack_imports(built.cuda_binaries) if built.cuda_binaries else None
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        built.executable.export_library(path, fpack_imports=fpack)
    except OSError as err:
        raise UserError(f"cannot write {err.filename or path}: {err.strerror or err}") from None


@contextlib.contextmanager
def exported(built: BuiltCandidate):
    """``export_candidate``'s artifact path for the ``with`` (run here or uploaded), its folder
    removed afterwards."""
    path = export_candidate(built)
    try:
        yield path
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
