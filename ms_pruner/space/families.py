"""The tensor-core design spaces a user chooses from: WMMA, pipelined mma.sync, or both.

TVM 0.27's default CUDA tensor-core rules hold two tiling rules, a WMMA one (16x16x16 fragments,
synchronous copies, the result staged through shared memory) and an mma.sync one (m16n8k8
fragments loaded with ldmatrix from a permuted shared layout, a software pipeline of cp.async
copies, the result stored from registers to global). Both claim the same GEMM blocks and the WMMA
rule comes first, so stock MetaSchedule never samples the second. Here each family is a
``PostOrderApply`` of its own, and ``all`` is their ``SpaceGeneratorUnion``: the sketches of both,
one set of postprocessors and mutators, so stock MetaSchedule and Pruner can search the same space.

The mma family adds four things to TVM's rule: m16n8k16 intrinsics beside its m16n8k8 ones
(``mma_k16.py``), sketches at several pipeline depths (``PipelineDepths``), a fused epilogue that
lowers (``EpilogueAfterFragmentStore``), and a postprocessor that drops at sampling the tilings TVM
cannot lower (``PermutedLayoutCheck``).
"""

from __future__ import annotations

from typing import Dict, List, Optional

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..errors import UserError
from ..hardware import spec_for_target
from ..intrinsics import register_tensor_intrinsics
from ..mma_k16 import ACCUMULATORS, LOAD_A, LOAD_B, LOAD_B_TRANS, compute_name
from .checks import PermutedLayoutCheck
from .epilogue import EpilogueAfterFragmentStore
from .operand_layout import compute_intrinsic, mma_shape_of
from .pipeline import PipelineDepths, outer_stage_annotation

SPACES = ("auto", "wmma", "mma", "all")
FAMILIES = ("wmma", "mma")
MMA_MIN_ARCH = 80  # ldmatrix, cp.async and mma.sync m16n8k8 with fp32 accumulators: sm_80 and later
TILING_STRUCTURE = "SSSRRSRS"
TILE_BINDS = ["blockIdx.y", "blockIdx.x", "threadIdx.y"]
VECTOR_LOAD_LENS = [1, 2, 3, 4, 8, 16]
MAX_INNERMOST_FACTOR = 4


def _group(init: str, load_a: str, load_b: str, compute: str, store: str) -> Dict[str, str]:
    return {"init": init, "load_a": load_a, "load_b": load_b, "compute": compute, "store": store}


def _wmma_groups() -> List[Dict[str, str]]:
    """TVM's WMMA groups: fp16 in with fp32 or fp16 accumulators, int8 in with int32, B plain or transposed."""
    groups = []
    for acc, operand in (("f32", "f16"), ("f16", "f16"), ("s32", "s8")):
        compute = {"f32": "f16f16f32", "f16": "f16f16f16", "s32": "s8s8s32"}[acc]
        for trans in ("", "_trans"):
            groups.append(_group(f"wmma_fill_16x16x16_{acc}", f"wmma_load_16x16x16_{operand}_a_shared_dyn",
                                 f"wmma_load_16x16x16_{operand}_b{trans}_shared_dyn",
                                 f"wmma_sync_16x16x16_{compute}{trans}", f"wmma_store_16x16x16_{acc}_shared_dyn"))
    return groups


def _mma_groups() -> List[Dict[str, str]]:
    """TVM's mma.sync m16n8k8 groups and the package's m16n8k16 ones (mma_k16.py, B k-major or
    n-major): fp16 in, fp16 or fp32 accumulators stored straight to global."""
    k8 = [_group(f"mma_init_m16n8k8_{acc}", "mma_load_m16n8k8_f16_A_shared_dyn", "mma_load_m16n8k8_f16_B_shared_dyn",
                 f"mma_sync_m16n8k8_f16f16{acc}", f"mma_store_m16n8k8_{acc}_global") for acc in ("f16", "f32")]
    k16 = [_group(f"mma_init_m16n8k8_{acc}", LOAD_A, LOAD_B_TRANS if trans_b else LOAD_B, compute_name(acc, trans_b),
                  f"mma_store_m16n8k8_{acc}_global") for acc in ACCUMULATORS for trans_b in (False, True)]
    return k8 + k16


def tiling_rule(family: str, in_union: bool = False):
    """TVM's tensor-core tiling rule of ``family``, with TVM's default settings for it; the mma
    rule at several pipeline depths, keeping only its pipelined sketches ``in_union`` with WMMA."""
    register_tensor_intrinsics()
    mma = family == "mma"
    rule = ms.schedule_rule.MultiLevelTilingTensorCore(
        intrin_groups=_mma_groups() if mma else _wmma_groups(),
        structure=TILING_STRUCTURE,
        tile_binds=list(TILE_BINDS),
        max_innermost_factor=MAX_INNERMOST_FACTOR,
        vector_load_lens=list(VECTOR_LOAD_LENS),
        reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope="shared.dyn"),
        reuse_write=ms.schedule_rule.ReuseType(req="no" if mma else "must", levels=[2], scope="shared.dyn"),
        use_software_pipeline=mma,
    )
    if mma:
        return PipelineDepths(rule, only_pipelined=in_union)
    return rule


def family_rules(family: str, in_union: bool = False) -> list:
    """TVM's CUDA tensor-core rules with ``family``'s tiling rule alone (the rest as TVM orders them)."""
    if family not in FAMILIES:
        raise UserError(f"unknown rule family '{family}'; choose one of {', '.join(FAMILIES)}")
    cuda = list(ms.ScheduleRule.create("cuda"))
    if family == "mma":
        cuda = [EpilogueAfterFragmentStore(r) if isinstance(r, ms.schedule_rule.AutoInline) else r for r in cuda]
    return [cuda[0], tiling_rule(family, in_union), *cuda[1:]]


def space_postprocs() -> list:
    """TVM's tensor-core postprocessors, the permuted-layout check first (it is the cheapest)."""
    register_tensor_intrinsics()
    return [PermutedLayoutCheck(), *ms.Postproc.create("cuda-tensorcore")]


def space_mutators() -> dict:
    return ms.Mutator.create("cuda-tensorcore")


def family_generator(family: str, in_union: bool = False):
    return ms.space_generator.PostOrderApply(sch_rules=family_rules(family, in_union), postprocs=space_postprocs(),
                                             mutator_probs=space_mutators())


def arch_number(target) -> int:
    """80 for ``sm_80``, 90 for ``sm_90a``; 0 when the target names no arch."""
    digits = "".join(ch for ch in str(target.attrs.get("arch", "")) if ch.isdigit())
    return int(digits) if digits else 0


def mma_takes(mod, target) -> bool:
    """Whether the mma rule tensorizes a block of ``mod`` (docs/space.md lists which workloads it takes)."""
    return any(sketch_family(s.trace) == "mma" for s in _sketches(family_generator("mma"), mod, target))


def resolve_space(choice: str, mod, target) -> str:
    """``choice`` with ``auto`` decided: ``all`` on an sm_80+ GPU where the mma rule takes a block of
    ``mod`` (or of one of a list of modules: a model's tasks), else ``wmma``; ``none`` for a target
    without tensor cores (llvm). ``mma`` where the rule takes no block is refused: its space would be
    the rule's CUDA-core fallback tiling alone, no tensor-core kernel in it (``mod`` None: not checked)."""
    if choice not in SPACES:
        raise UserError(f"unknown space '{choice}'; choose one of {', '.join(SPACES)}")
    if target.kind.name != "cuda":
        if choice not in ("auto",):
            raise UserError(f"--space {choice} is a CUDA tensor-core space; target {target.kind.name} has none")
        return "none"
    mods = mod if isinstance(mod, (list, tuple)) else [mod]
    if choice != "auto":
        if choice in ("mma", "all") and arch_number(target) < MMA_MIN_ARCH:
            raise UserError(f"--space {choice} needs sm_{MMA_MIN_ARCH} or later (cp.async, ldmatrix); "
                            f"target arch is {target.attrs.get('arch')}")
        if choice == "mma" and mod is not None and not any(mma_takes(m, target) for m in mods):
            raise UserError("--space mma: TVM's mma rule tensorizes no block of this workload (it takes fp16 GEMM "
                            "blocks of three loops, S S R; docs/space.md lists which); choose wmma, all or auto")
        return choice
    return "all" if arch_number(target) >= MMA_MIN_ARCH and any(mma_takes(m, target) for m in mods) else "wmma"


def space_generator(resolved: str):
    """The MetaSchedule space generator of a resolved space (``resolve_space``); for ``none``
    MetaSchedule's own from the target."""
    if resolved == "none":
        return "post-order-apply"
    if resolved in FAMILIES:
        return family_generator(resolved)
    rules = family_rules("wmma")
    return ms.space_generator.SpaceGeneratorUnion([family_generator(f, in_union=True) for f in FAMILIES], sch_rules=rules,
                                                  postprocs=space_postprocs(), mutator_probs=space_mutators())


def uses_opt_in_shared_memory(resolved: str) -> bool:
    """Whether a space's kernels may use the GPU's opt-in shared memory a block: the pipelined mma
    family keeps ``stages`` copies of its operand tiles in dynamic shared memory, which the 48 KB of
    TVM's target tags rules out for most useful tiles. The WMMA family keeps the tag's limit so its
    records stay comparable with the ones tuned before the space choice existed."""
    return resolved in ("mma", "all")


def space_target(resolved: str, target):
    """``target`` as a resolved space is tuned with: a GPU target's shared memory a block raised from
    the tag's default to its GPU's opt-in limit (``GPUSpec.smem_per_block_bytes``) where the space
    uses it; else as given (another cap is the user's: ``--target '{..., "max_shared_memory_per_block": N}'``)."""
    if target.kind.name != "cuda" or not uses_opt_in_shared_memory(resolved):
        return target
    spec = spec_for_target(target)
    if int(target.attrs.get("max_shared_memory_per_block", 0)) not in (0, spec.smem_per_block_default_bytes):
        return target
    limit = spec.smem_per_block_bytes
    config = dict(target.export())
    config["max_shared_memory_per_block"] = limit
    return Target(config)


def tuning_space(choice: str, mod, target):
    """(resolved space, target to tune with, MetaSchedule space generator) for a space ``choice``."""
    resolved = resolve_space(choice, mod, target)
    return resolved, space_target(resolved, target), space_generator(resolved)


def _sketches(generator, mod, target):
    context = ms.TuneContext(mod=mod, target=target, space_generator=generator, num_threads=1)
    return context.space_generator.generate_design_space(context.mod)


def _family_of(intrinsic: Optional[str]) -> Optional[str]:
    return intrinsic.split("_sync")[0] if intrinsic else None


def sketch_family(trace) -> Optional[str]:
    """``wmma`` or ``mma`` for a trace tensorized by that family's tiling rule, else None."""
    return _family_of(compute_intrinsic(trace))


def mma_shape(trace) -> Optional[str]:
    """``m16n8k8`` or ``m16n8k16``: the instruction of an mma-family trace; None for another."""
    return mma_shape_of(compute_intrinsic(trace))


def tensor_instruction(trace) -> Optional[str]:
    """``wmma``, ``m16n8k8`` or ``m16n8k16``: the tensor-core instruction a trace's sketch computes with
    (the mma family's two are sketches of their own); None off tensor cores. The trace is read once:
    the climb groups every draft member by it."""
    intrinsic = compute_intrinsic(trace)
    return mma_shape_of(intrinsic) or _family_of(intrinsic)


def pipeline_depth(trace) -> Optional[int]:
    """Shared-memory stages of a pipelined trace: its outer pipeline's last stage + 1; None unpipelined."""
    stages = outer_stage_annotation(trace)
    return max(stages) + 1 if stages else None
