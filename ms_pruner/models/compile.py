"""A tuned Relax module compiled as its kernels were built when they were measured.

MetaSchedule's ``compile_relax`` applies the database (``MetaScheduleApplyDatabase``), schedules
what it does not cover with DLight, and builds under a bare ``PassContext(opt_level=3)``. The
tensor-core kernels a tuning run measured were built by our builder under its pass options
(``builder.build_pass_config``: no storage rewrite, asynchronous copies); without them TVM 0.27
rejects a tuned fp16->fp32 WMMA kernel at lowering ("tvm_access_ptr element type must match the
source buffer"), so a model tuned on CUDA did not compile. ``compile_tuned`` is the same pipeline,
from TVM's public passes, under those options, with the tuned kernels rewritten as the builder
rewrites them (``builder.rewritten_schedule``: swizzled copies split by chunk, mma epilogues fused,
odd fp16 lanes unrolled), lowered by the builder's TIR pipeline (``builder.wait_counts``).
"""

from __future__ import annotations

from typing import Dict, Optional

import tvm
from tvm import relax
from tvm.relax import pipeline as relax_pipeline
from tvm.s_tir import dlight

from ..builder import (PRUNER_TIR_PIPELINE, build_pass_config, cuda_compile_scope, register_pruner_pipeline,
                       rewritten_schedule, with_device_code, write_library)
from ..errors import require_library_name
from ..hardware import resolve_target


def compile_tuned(database, mod, target, params: Optional[Dict] = None):
    """The VM executable of Relax ``mod`` for ``target``, with ``database``'s best schedules."""
    if params:
        mod = relax.transform.BindParams("main", params)(mod)
    dispatch = relax_pipeline.library_dispatch_passes(target)
    lower = _lower_passes(target)
    on_gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def tuned_pipeline(mod, _context):
        fuse = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
        mod = tvm.transform.Sequential(fuse)(mod)
        mod = rewritten_schedule(relax.transform.MetaScheduleApplyDatabase()(mod))
        if on_gpu:
            mod = _default_gpu_schedules()(mod)
        return tvm.transform.Sequential(lower)(mod)

    register_pruner_pipeline()
    with target, database, tvm.transform.PassContext(opt_level=3, config=build_pass_config(target)), \
            cuda_compile_scope(target):  # on a GPU machine codegen compiles CUDA here: nvcc, not NVRTC
        return relax.build(mod, target=target, relax_pipeline=tuned_pipeline, tir_pipeline=PRUNER_TIR_PIPELINE)


def export_model(executable, target, path: str) -> None:
    """A compiled model as the library ``path`` (``.so``, or ``.tar`` to link elsewhere): its CUDA
    compiled here with nvcc where code generation left source, so the machine that runs it needs
    neither nvcc nor TVM's compiler. ``relax.VirtualMachine(tvm.runtime.load_module(path), device)``
    runs it; a torch model's weights are inside, so ``main`` takes the inputs alone. ``target``: a
    ``tvm.target.Target`` or what ``--target`` takes."""
    require_library_name("path", path)
    if isinstance(target, (str, dict)):
        target = resolve_target(target, require_device=False).target
    write_library(with_device_code(executable, target), path)


def _default_gpu_schedules():
    """DLight's rules for the functions no record covers, as ``compile_relax`` applies them."""
    gpu = dlight.gpu
    return dlight.ApplyDefaultSchedule(gpu.Matmul(), gpu.GEMV(), gpu.Reduction(), gpu.GeneralReduction(),
                                       gpu.Fallback())


def _lower_passes(target) -> list:
    """Relax's lowering and finalising passes for ``target``; TVM 0.27 registers none for CUDA, and
    ``compile_relax`` then uses these."""
    try:
        return relax_pipeline.dataflow_lower_passes(target) + relax_pipeline.finalize_passes(target)
    except (ValueError, AttributeError):
        passes = relax.transform
        return [passes.RewriteDataflowReshape(), passes.ToNonDataflow(), passes.RemovePurityChecking(),
                passes.CallTIRRewrite(), passes.StaticPlanBlockMemory(), passes.LowerAllocTensor(),
                passes.KillAfterLastUse(), passes.LowerRuntimeBuiltin(), passes.ComputePrimValue(),
                passes.VMShapeLower(), passes.AttachGlobalSymbol()]
