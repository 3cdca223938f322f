"""Design spaces: the WMMA and pipelined mma.sync families, their checks, and what the analyzer and
nvcc make of their candidates (no GPU needed). The search over both: test_space_families.py; the
m16n8k16 fragments: test_mma_k16.py."""

import collections
import itertools
import json

import pytest

from conftest import needs_nvcc, tiled_candidate, workload_space
from ms_pruner.errors import UserError
from ms_pruner.workloads import parse_workload

GEMM = "matmul:4096x4096x4096:float16:float32"
CONV = "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32"


def _mod(spec):
    from ms_pruner.tuning.driver import normalized_mod

    return normalized_mod(parse_workload(spec).prim_func())


def test_auto_space_is_both_families_where_the_mma_rule_takes_a_block_on_sm80(tensor_intrinsics):
    from tvm.target import Target

    from ms_pruner.hardware import get_gpu_spec, llvm_target
    from ms_pruner.space import resolve_space

    h100 = get_gpu_spec("h100").target()
    assert resolve_space("auto", _mod(GEMM), h100) == "all"
    assert resolve_space("auto", _mod(CONV), h100) == "all"  # an NHWC conv2d is a GEMM to the mma rule too
    assert resolve_space("auto", _mod("matmul:256x256x256:float32:float32"), h100) == "wmma"  # no fp32 mma group
    # docs/space.md's list: the rest of what the mma rule takes, and what it leaves ("only SSR loops").
    for spec in ("matmul_nt:1024x1024x1024:float16:float32", "dense_bias:2048x3072x768:float16:float32",
                 "dense_bias_relu:2048x3072x768:float16:float32", "matmul:4096x4096x4096:float16:float16"):
        assert resolve_space("auto", _mod(spec), h100) == "all", spec
    # The mma rule's fixed warp tiling raises a ScheduleError on M = 16 and N = 1000 (which ended the
    # whole design space, and tuning on the default space); it now leaves those blocks to WMMA.
    for spec in ("batch_matmul:12x128x128x64:float16:float32", "conv2d_nhwc:16x56x56x64x64k1s1p0:float16:float32",
                 "matmul:16x4096x4096:float16:float32", "matmul:2048x1000x768:float16:float32"):
        assert resolve_space("auto", _mod(spec), h100) == "wmma", spec
    assert resolve_space("auto", _mod(GEMM), llvm_target(1)) == "none"
    assert resolve_space("wmma", _mod(GEMM), h100) == "wmma"
    turing = Target({"kind": "cuda", "arch": "sm_75", "max_shared_memory_per_block": 49152,
                     "max_threads_per_block": 1024, "thread_warp_size": 32})
    assert resolve_space("auto", _mod(GEMM), turing) == "wmma"
    for choice, target in (("mma", turing), ("all", turing), ("mma", llvm_target(1)), ("wide", h100)):
        with pytest.raises(UserError):
            resolve_space(choice, _mod(GEMM), target)


def test_a_target_given_as_a_bare_json_dict_gets_the_limits_its_space_needs(tensor_intrinsics):
    """MetaSchedule's rules read the target's thread and shared-memory limits: TVM 0.27's dict form
    without them stops in TuneContext; ``--target`` completes it from the GPU's sheet, and a shared
    memory cap it sets is kept where the mma space would raise the tag's."""
    from tvm.target import Target

    from ms_pruner.hardware import GPUS, resolve_target
    from ms_pruner.space import tuning_space

    bare = '{"kind": "cuda", "arch": "sm_80"}'
    with pytest.raises(Exception, match="max_threads_per_block"):
        tuning_space("auto", _mod(GEMM), Target(json.loads(bare)))
    resolved, target, _ = tuning_space("auto", _mod(GEMM), resolve_target(bare, require_device=False).target)
    assert resolved == "all" and target.attrs["max_shared_memory_per_block"] == GPUS["a100"].smem_per_block_bytes
    capped = resolve_target('{"kind": "cuda", "arch": "sm_80", "max_shared_memory_per_block": 98304}',
                            require_device=False).target
    assert tuning_space("all", _mod(GEMM), capped)[1].attrs["max_shared_memory_per_block"] == 98304  # the user's


def test_all_space_holds_both_families_with_the_opt_in_shared_memory(tensor_intrinsics):
    from ms_pruner.space import mma_shape, pipeline_depth, sketch_family

    resolved, target, space = workload_space(GEMM, "all")
    families = collections.Counter(sketch_family(s) for s in space.sketches)
    assert resolved == "all" and families["wmma"] >= 1 and None not in families
    mma = sorted((mma_shape(s), pipeline_depth(s)) for s in space.sketches if sketch_family(s) == "mma")
    assert mma == [(shape, depth) for shape in ("m16n8k16", "m16n8k8") for depth in (2, 3, 4)]
    assert int(target.attrs["max_shared_memory_per_block"]) == 227 * 1024
    # The WMMA family alone keeps the tag's 48 KB, as every record tuned before the space choice.
    _, wmma_target, wmma = workload_space(GEMM, "wmma")
    assert int(wmma_target.attrs["max_shared_memory_per_block"]) == 48 * 1024
    assert len(wmma.sketches) == families["wmma"]
    # Where the mma rule cannot tensorize (fp32) it falls back to CUDA-core tiling, which the union
    # leaves out: the WMMA family's space holds the same sketch.
    fp32 = "matmul:256x256x256:float32:float32"
    assert len(workload_space(fp32, "all")[2].sketches) == len(workload_space(fp32, "wmma")[2].sketches)


def _mma_draw(space, depth, i, j, k, unroll=0, shape="m16n8k8"):
    """The mma sketch of ``depth`` and instruction ``shape`` replayed with the given tile decisions
    and unroll choice."""
    from tvm.s_tir.schedule import Trace

    from ms_pruner.space import mma_shape, pipeline_depth

    sketch = next(s for s in space.sketches if pipeline_depth(s) == depth and mma_shape(s) == shape)
    draws = [inst for inst in sketch.insts if inst.kind.name.startswith("Sample")]
    return sketch, Trace(sketch.insts, dict(zip(draws, [i, j, k, unroll])))


def test_pipeline_depth_sets_the_shared_copies_the_analyzer_predicts(tensor_intrinsics):
    """TVM keeps one copy of each operand tile per stage up to the last that reads it: the inner
    fragment loop's prologue, and its body where that loop runs more than once. The analyzer reads
    that from the schedule and predicts the kernel's allocation to the byte."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder.resources import allocated_shared_bytes
    from ms_pruner.builder.worker import lowered_tir

    _, target, space = workload_space(GEMM, "mma")
    analyzer = StaticAnalyzer.for_target(target)
    tile = (256 + 256) * 2  # a 256 x 256 block tile: bytes of A and B per k element
    for (k, inner_trips), (shape, depth_k) in itertools.product((([64, 2, 4], 2), ([128, 1, 4], 1)),
                                                                (("m16n8k8", 8), ("m16n8k16", 16))):
        if depth_k == 16:
            k = [k[0] // 2, *k[1:]]
        for depth in (2, 3, 4):
            _, trace = _mma_draw(space, depth, [1, 16, 1, 2, 8], [4, 4, 8, 4, 1], k, shape=shape)
            sch = space.replay(trace, seed=1)
            copies = depth - (depth > 2 and inner_trips == 1)
            k_tile = k[1] * k[2] * depth_k
            if copies * tile * k_tile > 227 * 1024:
                assert sch is None  # VerifyGPUCode counts the stages too
                continue
            allocated = allocated_shared_bytes(lowered_tir(sch.mod, target))
            assert allocated == [copies * tile * k_tile]
            assert analyzer.estimate(sch).features[0].smem_per_block == copies * tile * k_tile


def test_a_padded_operand_tile_is_predicted_to_the_byte(tensor_intrinsics):
    """N = 1000 pads B to whole 16-column fragments (a classifier head): the analyzer scales the tile
    by a quotient, and still predicts the kernel's allocation in whole bytes (it once said 15359)."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder.resources import allocated_shared_bytes
    from ms_pruner.builder.worker import lowered_tir

    _, target, space = workload_space("matmul:2048x1000x768:float16:float32", "wmma")
    sch = tiled_candidate(space, "wmma", None, [[32, 4, 1, 1, 1], [1, 9, 1, 7, 1], [16, 1, 3]])
    features = StaticAnalyzer.for_target(target).estimate(sch).features[0]
    assert allocated_shared_bytes(lowered_tir(sch.mod, target)) == [features.smem_per_block] == [15360]


def test_the_space_report_names_each_candidates_unroll_step(tensor_intrinsics):
    """One tiling at two unroll decisions is two kernels to ptxas (a conv2d tiling's local memory
    goes from a stack to spills to none across them, docs/space.md): the report tells them apart by
    the step the trace asked for (the mma rule's choices: 0, 16, 32, ..., 1024), in JSON and in text."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.evaluation.space_report import describe, format_report

    _, target, space = workload_space(GEMM, "mma")
    analyzer = StaticAnalyzer.for_target(target)
    tiles = [[32, 1, 2, 4, 1], [1, 32, 2, 8, 1], [128, 2, 1]]
    steps = [describe(tiled_candidate(space, "m16n8k16", 3, tiles, unroll=index), analyzer) for index in (0, 6)]
    assert [c["unroll_max_step"] for c in steps] == [0, 512]
    assert steps[0]["tiles"] == steps[1]["tiles"] == tiles
    text = format_report({"workload": GEMM, "gpu": "h100", "space": "mma", "resolved_space": "mma",
                          "max_shared_memory_per_block": 0, "sketches": {}, "sketch_pipeline_depths": [],
                          "sampled": 2, "sampling": {"drawn": 2, "rejected": {}, "duplicates": 0},
                          "variety": {}, "candidates": steps})
    assert "depth 3 unroll 0 |" in text and "depth 3 unroll 512 |" in text


def test_permuted_layout_check_drops_the_draws_tvm_cannot_lower(tensor_intrinsics):
    """Without the check this draw reaches the builder and fails there: a k tile of 16 stops TVM's
    lowering of the permuted layout."""
    from ms_pruner.builder.worker import lowered_tir
    from ms_pruner.space import permuted_copies_lowerable
    from ms_pruner.search.space import DesignSpace

    _, target, space = workload_space(GEMM, "mma")
    unchecked = DesignSpace(space.mod, target, space=_without_check(space))
    _, short_k = _mma_draw(unchecked, 3, [4, 2, 4, 2, 2], [4, 4, 4, 4, 2], [256, 1, 2])
    sch = unchecked.replay(short_k, seed=1)
    assert not permuted_copies_lowerable(sch) and space.replay(short_k, seed=1) is None
    with pytest.raises(Exception, match="Permuted"):
        lowered_tir(sch.mod, target)


@pytest.mark.parametrize("separate_lanes", ["1", "0"])
def test_unrolled_long_permuted_rows_pass_the_check_and_compile(tensor_intrinsics, monkeypatch, separate_lanes):
    """A 1024-wide B row copied by 64 threads with its copy loop unrolled whole: TVM's own lowering
    of the copy leaves 8-lane int32 vectors (which CUDA code generation once wrote as code nvcc
    rejects; the builder's source fix compiles them), the builder's chunked copies none. Either way
    the check lets the draw through and nvcc compiles it, its copies asynchronous."""
    from ms_pruner.builder.worker import cuda_sources, lowered_tir

    monkeypatch.setenv("MS_PRUNER_SEPARATE_COPY_LANES", separate_lanes)
    _, target, space = workload_space(GEMM, "mma")
    _, whole = _mma_draw(space, 3, [4, 2, 1, 8, 4], [1, 4, 2, 8, 8], [128, 1, 4], 4)
    sch = space.replay(whole, seed=1)
    assert sch is not None
    assert ("int32x8" in lowered_tir(sch.mod, target).script()) == (separate_lanes == "0")
    assert "cp.async" in "".join(cuda_sources(sch.mod, target))  # compiled by nvcc


def _without_check(space):
    """The space's generator with TVM's postprocessors only (the permuted-layout check left out)."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.space.families import family_rules, space_mutators

    return ms.space_generator.PostOrderApply(sch_rules=family_rules("mma"), postprocs=ms.Postproc.create("cuda-tensorcore"),
                                             mutator_probs=space_mutators())


def test_droplet_moves_a_partitioned_tile_within_its_constraint(tensor_intrinsics):
    from ms_pruner.search.droplet import neighbour_decisions

    _, _, space = workload_space(GEMM, "mma")
    _, trace = _mma_draw(space, 3, [1, 16, 1, 2, 8], [4, 4, 8, 4, 1], [64, 2, 4])
    moves = [(inst, new) for inst, new in neighbour_decisions(trace) if inst.kind.name == "SamplePartitionedTile"]
    assert moves
    for inst, new in moves:
        position, multiple = int(inst.attrs[1]), int(inst.attrs[2])
        inner = 1
        for factor in new[position:]:
            inner *= factor
        assert inner % multiple == 0
    # j = (4, 4, 8, 4, 1) has inner part 4 = its multiple: no move may take a 2 out of it.
    j_moves = [new for inst, new in moves if int(inst.attrs[2]) == 4]
    assert j_moves and all(new[3] * new[4] % 4 == 0 for new in j_moves)


@needs_nvcc
@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.slow
def test_sampled_mma_candidates_build_with_async_copies_as_the_analyzer_predicts(gpu, tensor_intrinsics):
    """32 draws of the mma space, every one lowered and compiled with nvcc: no build error, each
    kernel's SASS runs HMMA of its instruction's shape, ldmatrix and cp.async, and the analyzer,
    reading the schedule before lowering, predicted its shared memory (stages included) to the byte
    and, on all but two at most, whether ptxas puts registers in local memory (spill stores or a stack
    for the accumulator array), on a set that holds both."""
    from ms_pruner.evaluation.space_report import SpaceQuery, space_report

    report = space_report(SpaceQuery(GEMM, gpu=gpu, space="mma", sample=32, build=True, seed=0, jobs=2))
    candidates = report["candidates"]
    assert report["sampled"] == report["built"] == 32 and report["errors"] == 0
    assert len({json.dumps(c["tiles"]) for c in candidates}) >= 8
    assert len(report["variety"]["pipeline_depths"]) >= 2
    assert {c["instruction"] for c in candidates} == {"m16n8k8", "m16n8k16"}
    for c in candidates:
        assert min(c["sass"][name] for name in ("HMMA", "LDSM", "LDGSTS")) > 0, c
        assert list(c["hmma_shapes"]) == [{"m16n8k8": "1688", "m16n8k16": "16816"}[c["instruction"]]], c
        assert c["analyzer_shared_bytes"] == c["shared_bytes"], c
    # The spill call misses where ptxas decides at the margin (a count within a register of the cap;
    # small tiles whose count the estimate puts above what ptxas needs; on the A100 two kernels whose
    # unrolled parity loop sm_80's ptxas fits in fewer registers than both fragment copies need, which
    # sm_90a's does not): docs/space.md's table.
    assert sum(c["analyzer_spills"] == c["spills"] for c in candidates) >= {"h100": 30, "a100": 28}[gpu]
    assert {c["spills"] for c in candidates} == {True, False}
    agreement = report["analyzer_agreement"]
    assert agreement["parity_unrolled"] >= 1 and agreement["parity_unroll_agrees"] >= 30
    assert agreement["with_issue_floor"] == 32  # every kernel's MMA loop found in its SASS and issued


def test_space_command_reports_sketches_samples_and_rejections(tensor_intrinsics, capsys):
    from ms_pruner.cli import main

    assert main(["space", GEMM, "--gpu", "h100", "--space", "all", "--sample", "6", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"sketches", "sampled", "built", "errors", "candidates"} <= set(report)
    assert report["sketches"]["mma"] == 6 and report["sketches"]["wmma"] >= 1
    assert report["sampled"] == len(report["candidates"]) == 6 and report["built"] == report["errors"] == 0
    sampling = report["sampling"]
    assert sampling["drawn"] == sampling["valid"] + sum(sampling["rejected"].values())
    assert set(sampling["rejected"]) <= {"PermutedLayoutCheck", "VerifyGPUCode", "replay"}
    assert main(["space", GEMM, "--gpu", "h100", "--space", "mma", "--sample", "-1"]) == 2
    assert "--sample" in capsys.readouterr().err
    # Where the mma rule takes no block, its space is CUDA-core fallback tiling alone: refused, not searched.
    one_by_one = "conv2d_nhwc:16x56x56x64x256k1s1p0:float16:float32"
    assert main(["space", one_by_one, "--gpu", "h100", "--space", "mma", "--sample", "1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--space mma" in error[0] and "wmma" in error[0]
    assert main(["space", one_by_one, "--gpu", "h100", "--space", "auto", "--sample", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resolved_space"] == "wmma"


def test_the_analyzer_and_pacm_read_an_mma_kernel_block_by_block(tensor_intrinsics):
    """The walk names TVM 0.27's mma intrinsics, counts the auto copies once a block (not once a
    warp), and PaCM's tokens see every data-flow pattern of the kernel."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.cost_model.tokens import block_pattern

    _, target, space = workload_space(GEMM, "mma")
    _, trace = _mma_draw(space, 3, [1, 16, 1, 2, 8], [4, 4, 8, 4, 1], [64, 2, 4])
    sch = space.replay(trace, seed=1)
    programs, estimate = StaticAnalyzer.for_target(target).analyze(sch)
    patterns = {block_pattern(b) for b in programs[0].blocks}
    assert {"copy_global_to_shared", "load_fragment", "mma", "init_fragment", "store_fragment"} <= patterns
    features = estimate.features[0]
    assert features.mma_count == 4096 ** 3 / (16 * 8 * 8) and features.pipeline_stages == 3
    assert features.threads_per_block == 8 * 32 and features.acc_fragments_per_warp == 16 * 4  # i: 2 x 8, j: 4 x 1
    blocks, trips = 16 * 16, 64
    fetched = {c.name: c.bytes_total for c in features.copies if c.dst_scope == "shared.dyn"}
    assert fetched == {"A_reindex_shared.dyn": blocks * trips * 256 * 64 * 2,
                       "B_reindex_shared.dyn": blocks * trips * 64 * 256 * 2}


@needs_nvcc
def test_the_mma_ceiling_benchmark_compiles_for_ampere_and_hopper():
    """The GPU step measures the mma.sync ceiling with scripts/mma_ceiling.py; it must compile here,
    where no GPU can run it."""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    for arch in ("sm_80", "sm_90a"):
        proc = subprocess.run([sys.executable, "scripts/mma_ceiling.py", "--arch", arch, "--compile-only"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-500:]
        assert json.loads(proc.stdout) == {"arch": arch, "compiled": True}


@pytest.mark.slow
def test_every_kernel_of_the_tensorcore_suite_samples_tensor_core_candidates_that_lower(tensor_intrinsics):
    """The benchmark suite on the default space for the H100: each workload's space holds tensor-core
    sketches, and a sampled candidate lowers as the builder lowers it (compiles with nvcc where it
    is on PATH), so a GPU run of the suite spends its time measuring."""
    import shutil

    from ms_pruner.builder import lower_candidate
    from ms_pruner.evaluation.space_report import build_report
    from ms_pruner.space import sketch_family
    from ms_pruner.workloads import get_suite

    for workload in get_suite("tensorcore"):
        _, target, space = workload_space(workload.spec, "auto")
        assert {sketch_family(s) for s in space.sketches} & {"wmma", "mma"}, workload.spec
        (sch,) = space.sample(1, seed=1)
        assert sketch_family(sch.trace) in ("wmma", "mma"), workload.spec
        if shutil.which("nvcc"):
            assert build_report(sch, target)["status"] == "built", workload.spec
        else:
            lower_candidate(sch.mod, target)


@needs_nvcc
@pytest.mark.slow
def test_the_mma_space_holds_cutlass_ampere_gemm_tiling_and_builds_it_as_cutlass_does(tensor_intrinsics):
    """CUTLASS's default Ampere fp16 GEMM tile (128x128 a block, four warps of 64x64, k 32, three
    stages, m16n8k16) is a candidate of the H100 mma space: it passes the space's checks, the analyzer
    predicts its shared memory to the byte and no spill, and it ranks it above the same block split
    into eight warps of 32x64 (more shared-memory reads an MMA). Built, it runs as CUTLASS's kernel
    does: every register in the file but no local memory, a warp's k-step issues 8 ldmatrix.x4 for its
    32 m16n8k16 MMAs, and a lone warp issues its main loop at its stall counts, never waiting on a
    fragment (ptxas loads each k-step's ahead of its MMAs), so its issue floor leaves the estimate as
    it is. i tiles count 16 rows, j tiles 8 columns, k tiles 16."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.evaluation.space_report import build_report, describe

    _, target, space = workload_space(GEMM, "mma")
    analyzer = StaticAnalyzer.for_target(target)
    four_warps = tiled_candidate(space, "m16n8k16", 3, [[32, 1, 2, 4, 1], [1, 32, 2, 8, 1], [128, 2, 1]])
    eight_warps = tiled_candidate(space, "m16n8k16", 3, [[32, 1, 4, 2, 1], [1, 32, 2, 8, 1], [128, 2, 1]])
    assert four_warps is not None and eight_warps is not None
    estimate = analyzer.estimate(four_warps)
    predicted = describe(four_warps, analyzer, estimate)
    assert predicted["analyzer_shared_bytes"] == 3 * (128 + 128) * 32 * 2 and not predicted["analyzer_spills"]
    assert predicted["analyzer_latency_us"] < describe(eight_warps, analyzer)["analyzer_latency_us"]
    built = build_report(four_warps, target, estimate, analyzer.hardware)
    assert built["status"] == "built" and built["shared_bytes"] == predicted["analyzer_shared_bytes"], built
    assert built["spill_bytes"] == built["stack_bytes"] == 0 and built["registers"] >= 240, built
    assert built["hmma_shapes"] == {"16816": built["sass"]["HMMA"]} and built["sass"]["HMMA"] == 4 * built["sass"]["LDSM"]
    assert built["sass"]["LDGSTS"] > 0 and built["sass"]["LDG"] == 0
    assert built["warp_trip_cycles"] > 0 and built["warp_trip_wait_cycles"] == 0, built
    assert built["issue_floor_us"] < built["analyzer_latency_with_floor_us"] == predicted["analyzer_latency_us"]


def test_a_linear_layers_gemm_gets_mma_sketches_that_copy_its_weights_as_stored(tensor_intrinsics):
    """``dense_bias`` reads its weights n-major, k contiguous; ``matmul`` and the conv2d k-major. Each
    m16n8k16 sketch computes with the B layout the workload stores (no transposing copy); TVM's
    m16n8k8 has the k-major compute only and keeps it. The check drops n-major draws whose B fragment
    TVM cannot lay out (an odd innermost k tile) before they reach the builder."""
    from ms_pruner.space.checks import fragments_lowerable
    from ms_pruner.space.operand_layout import compute_intrinsic

    dense = "dense_bias:2048x3072x768:float16:float32"
    for spec, trans in ((dense, True), (GEMM, False), (CONV, False)):
        _, _, space = workload_space(spec, "mma")
        computes = {compute_intrinsic(s) for s in space.sketches}
        assert {c for c in computes if "m16n8k16" in c} == {"mma_sync_m16n8k16_f16f16f32" + ("_trans" if trans else "")}
        assert {c for c in computes if "m16n8k8" in c} == {"mma_sync_m16n8k8_f16f16f32"}
    _, _, space = workload_space(dense, "mma")
    odd = tiled_candidate(space, "m16n8k16", 3, [[16, 1, 2, 4, 1], [1, 24, 4, 4, 1], [24, 2, 1]])
    assert odd is None
    even = tiled_candidate(space, "m16n8k16", 3, [[16, 1, 2, 4, 1], [1, 24, 4, 4, 1], [24, 1, 2]])
    assert even is not None and fragments_lowerable(even.trace)


@pytest.mark.slow
def test_the_check_keeps_every_wmma_kernel_stock_measured_on_the_h100(tensor_intrinsics, h100_runs):
    """WMMA's ``_trans`` compute has no mma B fragment to lay out, and every split of that rule is a
    perfect tile: its kernels with an odd innermost i factor ran on the H100 (stock's conv2d run), and
    the space's check keeps each of them, as it must keep anything stock MetaSchedule samples."""
    from ms_pruner.database.records import records_in_file_order, replay_record
    from ms_pruner.space.checks import PermutedLayoutCheck
    from ms_pruner.space.operand_layout import compute_intrinsic

    records = records_in_file_order(h100_runs("conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32", "stock"))
    trans = [r for r in records if compute_intrinsic(r.trace) == "wmma_sync_16x16x16_f16f16f32_trans"]
    def innermost_i(trace):
        return int(trace.decisions[next(i for i in trace.insts if i.kind.name == "SamplePerfectTile")][-1])

    odd_i = [r for r in trans if innermost_i(r.trace) % 2]
    assert len(trans) == 44 and len(odd_i) == 20 and all(r.run_secs for r in odd_i)
    check = PermutedLayoutCheck()
    assert all(check.apply(replay_record(r)) for r in trans)


@needs_nvcc
@pytest.mark.slow
def test_an_n_major_mma_kernel_copies_its_weights_with_cp_async(tensor_intrinsics, monkeypatch):
    """BERT's FFN GEMM (2048x3072x768 with bias) in eight 64x32 warps of a 128x128 block: with the
    n-major B load every global load of the GEMM kernel is a cp.async (no LDG there; built with the
    bias kernel apart, which has its own), its MMAs are m16n8k16, and nothing spills; the analyzer
    agrees on both."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.evaluation.space_report import build_report, describe

    monkeypatch.setenv("MS_PRUNER_FUSE_EPILOGUE", "0")

    _, target, space = workload_space("dense_bias:2048x3072x768:float16:float32", "mma")
    sch = tiled_candidate(space, "m16n8k16", 3, [[16, 1, 2, 4, 1], [1, 24, 4, 4, 1], [24, 1, 2]])
    predicted = describe(sch, StaticAnalyzer.for_target(target))
    built = build_report(sch, target)
    assert built["status"] == "built" and built["tensor_kernel_ldg"] == 0 and built["sass"]["LDGSTS"] > 0, built
    assert predicted["analyzer_synchronous_copies"] == 0 and not predicted["analyzer_spills"]
    assert built["hmma_shapes"] == {"16816": built["sass"]["HMMA"]} and built["spill_bytes"] == built["stack_bytes"] == 0
    assert built["shared_bytes"] == predicted["analyzer_shared_bytes"]
