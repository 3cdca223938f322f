"""Copies into the mma rule's swizzled shared layout: which stay a cp.async and which become
synchronous gathers in TVM's own lowering, as the analyzer predicts it before lowering
(analysis/swizzle.py), checked against TVM's lowering and nvcc's SASS (no GPU). The builder's
chunked copies (builder/copy_lanes.py, test_copy_lanes.py) are switched off here but where a test
says otherwise."""

import re

import pytest

from conftest import needs_nvcc, workload_space

COPY_LANES_ENV = "MS_PRUNER_SEPARATE_COPY_LANES"
GEMM = "matmul:2048x3072x768:float16:float32"
CONV = "conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32"
# Block tiles 32 x 768 (k tile 32) over 12, 6, 4 and 3 warps: whether the B copy's rows of 768
# elements gather depends on the warps, not on the row alone (a rule "rows of a power of two stay
# vectors" calls them all gathered); True where it does.
WIDE_ROWS = {12: False, 6: False, 4: True, 3: False}


def _wide_rows_tiles(warps):
    return (32, 2, 1, 1, 2), (2, 2, warps, 96 // warps, 1), (24, 2, 1)


@pytest.mark.parametrize("rows, width, threads, gathered", [
    (128, 96, (3, 32), True), (96, 384, (3, 32), True), (64, 96, (32,), True), (32, 384, (4, 32), True),
    (64, 128, (6, 32), False), (512, 32, (2, 32), False), (32, 512, (16, 32), False), (256, 64, (32,), False),
    (32, 768, (3, 32), False), (32, 768, (6, 32), False), (32, 1536, (32,), False),
])
def test_a_swizzled_row_gathers_where_the_simplifier_keeps_the_lane(rows, width, threads, gathered):
    from ms_pruner.analysis.swizzle import swizzle_gathers

    assert swizzle_gathers(rows, width, threads, 8) is gathered
    assert swizzle_gathers(rows, width, threads, 1) is False


def _with_tiles(space, sch, tiles):
    from ms_pruner.search.droplet import TILE_SAMPLES, ordered_decisions

    trace = sch.trace.simplified(remove_postproc=True)
    tile_insts = [inst for inst, _ in ordered_decisions(trace) if inst.kind.name in TILE_SAMPLES]
    for inst, tile in zip(tile_insts, tiles):
        trace = trace.with_decision(inst, list(tile), remove_postproc=True)
    return space.replay(trace, seed=1)


def _asynchronous_sources(lowered) -> set:
    """Global buffers some cp.async of the lowered module reads (the second ``.data`` of the call)."""
    sources = set()
    for call in re.findall(r"cp_async\w*\(([^\n]*)", lowered.script()):
        buffers = re.findall(r"(\w+)\.data", call)
        if len(buffers) > 1:
            sources.add(buffers[1])
    return sources


def _copy_predictions(sch) -> dict:
    from ms_pruner.analysis.tir_walk import walk_primfunc

    blocks = walk_primfunc(sch.mod["main"]).blocks
    return {b.reads[0].buffer: b.gathered for b in blocks if b.permuted}


@pytest.mark.slow
def test_the_analyzer_predicts_which_copies_lowering_leaves_synchronous(tensor_intrinsics, monkeypatch):
    """Each swizzled global->shared copy of sampled GEMM and conv2d candidates (and the wide-row
    tilings above) is a cp.async in TVM's lowered code exactly where the analyzer does not call it
    gathered; both kinds occur, and a gathered conv2d input copy is charged one element a request."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder.worker import lowered_tir

    monkeypatch.setenv(COPY_LANES_ENV, "0")
    seen = {True: 0, False: 0}
    for spec, seed, count in ((GEMM, 0, 6), (CONV, 1, 3)):
        _, target, space = workload_space(spec, "mma")
        schedules = space.sample(count, seed=seed, max_attempts=40 * count)
        if spec == GEMM:
            for warps, gathered in WIDE_ROWS.items():
                wide = _with_tiles(space, schedules[0], _wide_rows_tiles(warps))
                assert wide is not None and _copy_predictions(wide) == {"A": False, "B": gathered}
                schedules.append(wide)
        for sch in schedules:
            predicted = _copy_predictions(sch)
            asynchronous = _asynchronous_sources(lowered_tir(sch.mod, target))
            assert predicted == {name: name not in asynchronous for name in predicted}
            for gathered in predicted.values():
                seen[gathered] += 1
            if spec == CONV and predicted["inputs"]:
                copy = next(c for c in StaticAnalyzer.for_target(target).estimate(sch).features[0].copies
                            if c.synchronous)
                assert copy.vector_lanes == 1 and copy.address_divisions > 0
    assert seen[True] >= 2 and seen[False] >= 2, seen


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("split", ["0", "1"])
def test_space_report_checks_synchronous_copies_against_the_sass(tensor_intrinsics, monkeypatch, split):
    """``ms-pruner space --build`` compares the analyzer's synchronous copies with the global loads
    (LDG, which a cp.async is not) of the compiled GEMM kernel: on the first 8 draws of the
    BERT-shaped GEMM every one is called right; TVM's own lowering leaves some synchronous, the
    builder's chunked copies none."""
    from ms_pruner.evaluation.space_report import SpaceQuery, space_report

    monkeypatch.setenv(COPY_LANES_ENV, split)
    report = space_report(SpaceQuery(GEMM, gpu="h100", space="mma", sample=8, build=True, jobs=2))
    agreement = report["analyzer_agreement"]
    assert report["built"] == 8 and agreement["mma_synchronous_copy_agrees"] == 8, agreement
    synchronous = agreement["mma_with_synchronous_copies"]
    assert (0 < synchronous < 8) if split == "0" else synchronous == 0, agreement
