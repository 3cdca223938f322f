"""Fragment arrangements of one tensor-core tiling (search/arrangement.py) and the cold climb that adds them."""

import random

import pytest
import tvm_ffi

from conftest import H100_MM4096, needs_h100_data


@needs_h100_data
@pytest.mark.slow
def test_arrangement_variants_keep_the_geometry_and_the_estimate_and_cover_every_split(tensor_intrinsics):
    """The shared H100 database's best record loops its warp fragments one way; its arrangement
    variants are every other (S3, S4) split of each spatial dimension's fragments within the
    innermost bound, each of the same kernel geometry and estimate: ties the analyzer cannot rank.
    The cold climb adds them, each also at its wide fetch widths, only for ``arranged`` geometries."""
    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry
    from ms_pruner.database import replay_record
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.arrangement import arrangement_variant_traces, fragment_arrangement
    from ms_pruner.search.first_round.climb import cold_climb
    from ms_pruner.search.first_round.fetch_width import decisions_but_operand_fetches
    from ms_pruner.database.records import mean_latency, records_in_file_order

    best = min(records_in_file_order(H100_MM4096), key=mean_latency)
    start = replay_record(best)
    analyzer = StaticAnalyzer.for_target(best.target)
    space = DesignSpace(best.workload.mod, best.target)
    own = fragment_arrangement(start.trace)
    assert len(own) == 2

    variants = space.replay_valid(arrangement_variant_traces(start.trace), random.Random(0))
    arrangements = {fragment_arrangement(v.trace) for v in variants}
    expected = {(a, b) for a in _splits(own[0]) for b in _splits(own[1])} - {own}
    assert arrangements == expected and len(variants) == len(expected)
    start_estimate = analyzer.estimate(start.mod)
    for variant in variants:
        estimate = analyzer.estimate(variant.mod)
        assert kernel_geometry(estimate.features) == kernel_geometry(start_estimate.features)
        assert abs(estimate.latency_s / start_estimate.latency_s - 1.0) < 0.01

    def key_of(sch):
        return int(tvm_ffi.structural_hash(sch.mod))

    def latency(sch):
        return analyzer.estimate(sch.mod).latency_s

    def geometry(sch):
        return kernel_geometry(analyzer.estimate(sch.mod).features)

    def climb_adds(arranged):
        return cold_climb([start], space, latency, geometry, key_of, set(), starts=1, steps=0, moves_per_step=0,
                          rng=random.Random(0), arranged=arranged)

    _, fetch_variants, none = climb_adds(0)
    assert not none and {fragment_arrangement(v.trace) for v in fetch_variants} == {own}
    _, _, added = climb_adds(1)
    assert {fragment_arrangement(v.trace) for v in added} == expected
    assert len({decisions_but_operand_fetches(v.trace) for v in added}) == len(expected)
    assert len(added) > len(expected)  # the wide fetch widths of each arrangement too
    assert not {key_of(v) for v in added} & {key_of(v) for v in fetch_variants + [start]}


def _splits(pair):
    product = pair[0] * pair[1]
    return [(product // inner, inner) for inner in (1, 2, 4) if product % inner == 0]
