"""The first-round policy's moves on a GPU target, one by one: fetch widening, the analyzer climb and
its reshapes (WMMA and mma tilings), and the cap on picks of one kernel geometry."""

import numpy as np
import pytest

from ms_pruner.workloads import parse_workload
from conftest import H100_MM4096, needs_h100_data


def test_widest_fetch_variant_widens_only_the_cooperative_fetches(tensor_intrinsics):
    """A sample with a narrow operand fetch, widened: every cooperative-fetch draw at least as wide as
    before, every operand fetch at least as wide and at least one wider (a fetch whose vector lanes
    are not consecutive in memory is gathered lane by lane by code generation, so it stays narrow),
    the tiling and the other decisions untouched; a schedule already at the widest draws has nothing
    to widen."""
    from ms_pruner.analysis import StaticAnalyzer, has_narrow_fetch, kernel_geometry, operand_fetch_bytes
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, tile_decisions
    from ms_pruner.search.first_round.fetch_width import cooperative_fetch_decisions, widest_fetch_variant

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)
    narrow = [s for s in space.sample(8, seed=3) if has_narrow_fetch(analyzer.estimate(s.mod).features)]
    assert narrow, "three in four samples fetch an operand narrowly"

    def draws(trace):
        return [(inst.kind.name, int(trace.decisions[inst]) if inst.kind.name == "SampleCategorical"
                 else tuple(int(x) for x in trace.decisions[inst]) if inst.kind.name == "SamplePerfectTile" else None)
                for inst in trace.insts if inst in trace.decisions]

    for sch in narrow[:3]:
        base = sch.trace.simplified(remove_postproc=True)
        fetches = cooperative_fetch_decisions(base)
        assert len(fetches) >= 2  # the A and B operand copies (and the write-back)
        wide = widest_fetch_variant(space, sch.trace, seed=1)
        assert wide is not None
        widened = wide.trace.simplified(remove_postproc=True)
        before, after = analyzer.estimate(sch.mod), analyzer.estimate(wide.mod)
        widths = list(zip(operand_fetch_bytes(before.features), operand_fetch_bytes(after.features)))
        assert all(b >= a for a, b in widths) and any(b > a for a, b in widths), widths
        assert kernel_geometry(after.features) == kernel_geometry(before.features)
        assert tile_decisions(widened) == tile_decisions(base)
        sampled = [inst for inst in base.insts if inst in base.decisions]
        fetch_positions = {k for k, inst in enumerate(sampled) if any(inst.same_as(f) for f in fetches)}
        changed = {k: (a[1], b[1]) for k, (a, b) in enumerate(zip(draws(base), draws(widened))) if a != b}
        assert changed and set(changed) <= fetch_positions and all(b > a for a, b in changed.values())
        assert widest_fetch_variant(space, wide.trace, seed=1) is None


def test_wide_fetch_variants_cover_the_two_widest_draws_of_each_operand_fetch(tensor_intrinsics):
    """The variants a cold batch takes in turn within a geometry: one schedule replayed with its A and
    B operand fetches at each combination of their two widest draws (8 and 16 bytes for fp16) but its
    own, the write-back's draw, the tiling and the geometry untouched."""
    import random

    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry, operand_fetch_bytes
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, tile_decisions
    from ms_pruner.search.first_round.fetch_width import (cooperative_fetch_decisions, decisions_but_operand_fetches,
                                              operand_fetch_decisions, wide_fetch_variant_traces)

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)
    sch = space.sample(1, seed=3)[0]
    base = sch.trace.simplified(remove_postproc=True)
    operands = operand_fetch_decisions(base)
    write_back = [inst for inst in cooperative_fetch_decisions(base) if not any(inst.same_as(o) for o in operands)]
    assert len(operands) == 2 and len(write_back) == 1
    variants = space.replay_valid(wide_fetch_variant_traces(sch.trace), random.Random(0))
    own = tuple(int(base.decisions[inst]) for inst in operands)
    draws = set()
    for variant in variants:
        trace = variant.trace.simplified(remove_postproc=True)
        draws.add(tuple(int(trace.decisions[inst]) for inst in operand_fetch_decisions(trace)))
        assert tile_decisions(trace) == tile_decisions(base)
        assert int(trace.decisions[cooperative_fetch_decisions(trace)[0]]) == int(base.decisions[write_back[0]])
        estimate = analyzer.estimate(variant.mod)
        assert kernel_geometry(estimate.features) == kernel_geometry(analyzer.estimate(sch.mod).features)
        assert all(width >= 8 or width == 2 for width in operand_fetch_bytes(estimate.features))  # 2: gathered lanes
    candidates = [len(inst.attrs[0]) for inst in operands]  # 1, 2, 4, 8 lanes each
    widest_two = {(a, b) for a in range(candidates[0] - 2, candidates[0])
                  for b in range(candidates[1] - 2, candidates[1])}
    assert draws <= widest_two - {own} and len(draws) == len(variants) >= 2  # some fail the postprocessors
    family = decisions_but_operand_fetches(base)  # the decisions but the operand fetches': the same in each
    assert all(decisions_but_operand_fetches(v.trace) == family for v in variants)
    assert any(decisions_but_operand_fetches(other.trace) != family for other in space.sample(2, seed=4))
    # What each decision sets (measured neighbours are counted by it): a variant
    # differs from its base in an operand fetch only, and the kinds name the sketch's decisions.
    from ms_pruner.search import decision_kinds, decision_values

    kinds = decision_kinds(base)
    assert len(kinds) == len(decision_values(base)) and kinds.count("meta_schedule.cooperative_fetch") == 1
    assert {"tile 0", "tile 1", "tile 2", "operand fetch 0", "operand fetch 1",
            "meta_schedule.unroll_explicit"} <= set(kinds)
    for variant in variants:
        moved = {kind for kind, a, b in zip(kinds, decision_values(base), decision_values(variant.trace)) if a != b}
        assert moved and moved <= {"operand fetch 0", "operand fetch 1"}


def test_widening_replaces_narrow_picks_by_new_variants_estimated_no_slower(tensor_intrinsics):
    """``widen_narrow_picks`` on samples of which three in four fetch an operand narrowly: some are
    replaced, each by its widest-fetch variant, new and estimated no slower; a variant already
    measured is never picked; a pick left narrow had no such variant; a pick the caller keeps stays."""
    import random

    import tvm_ffi

    from ms_pruner.analysis import StaticAnalyzer, has_narrow_fetch
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.fetch_width import widen_narrow_picks, widest_fetch_variant

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)

    def estimate(sch):
        return analyzer.estimate(sch.mod)

    def key_of(sch):
        return int(tvm_ffi.structural_hash(sch.mod))

    picks = space.sample(8, seed=3)
    out, widened = widen_narrow_picks(picks, space, estimate, key_of, set(), random.Random(0))
    assert len(out) == len(picks) and widened > 0
    assert len({key_of(s) for s in out}) == len(out)
    replaced = [(a, b) for a, b in zip(picks, out) if a is not b]
    assert len(replaced) == widened
    for before, after in replaced:
        assert has_narrow_fetch(estimate(before).features)
        assert estimate(after).latency_s <= estimate(before).latency_s
    for before, after in zip(picks, out):
        if after is before and has_narrow_fetch(estimate(before).features):
            wide = widest_fetch_variant(space, before.trace, seed=1)
            assert wide is None or estimate(wide).latency_s > estimate(before).latency_s or \
                key_of(wide) in {key_of(s) for s in picks}
    measured = {key_of(after) for _, after in replaced}
    again, widened_again = widen_narrow_picks(picks, space, estimate, key_of, measured, random.Random(0))
    assert widened_again == 0 and all(a is b for a, b in zip(picks, again))
    kept = frozenset(key_of(before) for before, _ in replaced[:1])  # the follow-up keeps its neighbours as built
    held, _ = widen_narrow_picks(picks, space, estimate, key_of, set(), random.Random(0), kept)
    assert [a is b for a, b in zip(picks, held) if key_of(a) in kept] == [True]


def test_analyzer_climb_moves_tiles_only_and_improves_the_estimate(tensor_intrinsics):
    """The cold round's climb from a random tensor-core sample: every schedule it visits differs from
    the sample in tile sizes only (one prime factor moved per step, categorical draws untouched),
    and the best of them is estimated faster than the sample."""
    import random

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, tile_decisions
    from ms_pruner.search.first_round.climb import climb, tile_moves

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)

    def latency(sch):
        return analyzer.estimate(sch.mod).latency_s

    def categorical(trace):
        return [int(trace.decisions[inst]) for inst in trace.insts
                if inst in trace.decisions and inst.kind.name == "SampleCategorical"]

    start = max(space.sample(6, seed=7), key=latency)
    base = start.trace.simplified(remove_postproc=True)
    assert tile_moves(base) and all(inst.kind.name == "SamplePerfectTile" for inst, _ in tile_moves(base))
    visited = climb(space, [start], latency, steps=3, moves_per_step=16, rng=random.Random(0))
    assert visited
    for sch in visited:
        trace = sch.trace.simplified(remove_postproc=True)
        assert categorical(trace) == categorical(base)
        assert tile_decisions(trace) != tile_decisions(base)
        assert [int(np.prod(t)) for t in tile_decisions(trace)] == [int(np.prod(t)) for t in tile_decisions(base)]
    assert min(latency(s) for s in visited) < latency(start)
    assert len({tile_decisions(s.trace.simplified(remove_postproc=True)) for s in visited}) == len(visited)


def test_climbs_from_several_starts_replay_each_step_in_one_batch(tensor_intrinsics):
    """``climb.climb`` from three starts: the climbs go in lockstep, so a step is one batch of every
    climb's moves (and one of the reshapes of those no move improved), not a batch a climb, and each
    start's first step visits its own neighbours."""
    import random

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, tile_decisions
    from ms_pruner.search.first_round.climb import climb

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)
    starts = space.sample(3, seed=7)
    before = space.replays
    visited = climb(space, starts, lambda s: analyzer.estimate(s.mod).latency_s, steps=2, moves_per_step=8,
                    rng=random.Random(0))
    replayed, valid, batches = space.replays_since(before)
    assert valid == len(visited) and replayed > 2 * 8 and 2 <= batches <= 2 * 2
    own = [tile_decisions(s.trace.simplified(remove_postproc=True)) for s in starts]
    reached = {tile_decisions(s.trace.simplified(remove_postproc=True)) for s in visited}
    for start in own:  # one prime factor moved away from the start: a first-step neighbour of it
        assert any(sum(a != b for t, u in zip(start, tiling) for a, b in zip(t, u)) == 2 for tiling in reached)


def test_reshape_moves_keep_grid_warps_and_fragments_and_change_the_aspect(tensor_intrinsics):
    """``climb.reshape_moves`` of a tensor-core sample: each changes both spatial tile splits, keeps
    each split's product, keeps the product over both dimensions of each level group (grid, warps,
    within a warp: so block count, threads and fragments a warp stay) while changing how a group is
    shared between them, and keeps the innermost factor within its bound."""
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.climb import RESHAPE_GROUPS, reshape_moves

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)

    def group_products(factors):
        return [int(np.prod([factors[level] for level in group])) for group in RESHAPE_GROUPS]

    checked = valid = 0
    for sample in space.sample(6, seed=3):
        base = sample.trace.simplified(remove_postproc=True)
        for (first, new_first), (second, new_second) in reshape_moves(base):
            old = [[int(x) for x in base.decisions[inst]] for inst in (first, second)]
            assert len(old[0]) == len(old[1]) == 5 and new_first != old[0] and new_second != old[1]
            assert [int(np.prod(f)) for f in (new_first, new_second)] == [int(np.prod(f)) for f in old]
            before = [a * b for a, b in zip(group_products(old[0]), group_products(old[1]))]
            after = [a * b for a, b in zip(group_products(new_first), group_products(new_second))]
            assert after == before and group_products(new_first) != group_products(old[0])
            for inst, factors in ((first, new_first), (second, new_second)):
                assert factors[-1] <= int(inst.attrs[1])
            reshaped = base.with_decision(first, new_first, remove_postproc=True).with_decision(
                second, new_second, remove_postproc=True)
            valid += space.replay(reshaped, seed=1) is not None  # some break VerifyGPUCode: the climb drops them
            checked += 1
    assert checked > 0 and valid > 0


def test_an_mma_tiling_reshapes_and_rearranges_within_its_partitioned_splits(tensor_intrinsics):
    """The mma rule splits each spatial dimension with ``SamplePartitionedTile`` (within a warp a
    multiple of ``innerpart_factor``), not ``SamplePerfectTile``: its splits still get reshapes and
    fragment arrangements, each allowed by the split, and the reshapes keep each level group's
    product over both dimensions as WMMA's do."""
    import math
    import tvm

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.arrangement import arrangement_variant_traces, warp_tile_splits
    from ms_pruner.search.first_round.climb import RESHAPE_GROUPS, reshape_moves
    from ms_pruner.space import tuning_space

    mod = tvm.IRModule({"main": parse_workload("matmul:1024x1024x1024:float16:float32").prim_func()})
    _, target, generator = tuning_space("mma", mod, get_gpu_spec("h100").target())
    space = DesignSpace(mod, target, space=generator)

    def within_warp_allowed(inst, factors):
        return math.prod(factors[int(inst.attrs[1]):]) % int(inst.attrs[2]) == 0

    reshapes = arrangements = 0
    for sample in space.sample(4, seed=1):
        base = sample.trace.simplified(remove_postproc=True)
        splits = warp_tile_splits(base)
        assert len(splits) == 2 and {inst.kind.name for inst in splits} == {"SamplePartitionedTile"}
        for (first, new_first), (second, new_second) in reshape_moves(base):
            old = [[int(x) for x in base.decisions[inst]] for inst in (first, second)]
            for group in RESHAPE_GROUPS:
                assert (math.prod(new_first[g] for g in group) * math.prod(new_second[g] for g in group)
                        == math.prod(old[0][g] for g in group) * math.prod(old[1][g] for g in group))
            assert within_warp_allowed(first, new_first) and within_warp_allowed(second, new_second)
            reshapes += 1
        for variant in arrangement_variant_traces(base):
            for inst in warp_tile_splits(variant):
                assert within_warp_allowed(inst, [int(x) for x in variant.decisions[inst]])
            arrangements += 1
    assert reshapes > 0 and arrangements > 0


@needs_h100_data
@pytest.mark.slow
def test_climb_reshapes_the_stock_runs_best_block_into_the_one_the_analyzer_ranks_first(tensor_intrinsics):
    """From the shared H100 database's best record (a 64 x 256 block tile, 473.6 us measured) no
    single tile move improves the estimate: each gives a smaller or a larger block. A reshape (a
    factor out of one dimension's grid and into the other's) reaches the 128 x 128 block, the family
    of this project's fastest H100 matmul records, and the climb goes on from there."""
    import random

    from ms_pruner.analysis import StaticAnalyzer, geometry_name, kernel_geometry
    from ms_pruner.database import replay_record
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.climb import climb
    from ms_pruner.database.records import mean_latency, records_in_file_order

    best = min(records_in_file_order(H100_MM4096), key=mean_latency)
    start = replay_record(best)
    analyzer = StaticAnalyzer.for_target(best.target)
    space = DesignSpace(best.workload.mod, best.target)

    def latency(sch):
        return analyzer.estimate(sch.mod).latency_s

    def geometry(sch):
        return geometry_name(kernel_geometry(analyzer.estimate(sch.mod).features))

    assert geometry(start).endswith("operand tiles 8192+32768 B")
    visited = climb(space, [start], latency, steps=3, moves_per_step=24, rng=random.Random(0))
    reached = min(visited, key=latency)
    assert geometry(reached) == "grid 1024 x 128 thr, 16 acc frags, 64 trips, operand tiles 16384+16384 B"
    assert latency(reached) < 0.9 * latency(start)


def test_cold_climb_adds_the_wide_variants_of_several_members_of_a_geometry(tensor_intrinsics):
    """``climb.cold_climb`` with ``members=2``: a geometry whose draft holds two members of different
    families (here the best sample and the same kernel with another unroll depth) gets the wide
    fetch-width variants of both, each variant of its member's family and geometry, none already in
    the draft; with one member only the best one's."""
    import random

    import tvm_ffi

    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, decision_kinds, neighbour_decisions
    from ms_pruner.search.first_round.climb import cold_climb
    from ms_pruner.search.first_round.fetch_width import decisions_but_operand_fetches

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)
    estimates = {}

    def key_of(sch):
        return int(tvm_ffi.structural_hash(sch.mod))

    def latency(sch):
        if key_of(sch) not in estimates:
            estimates[key_of(sch)] = analyzer.estimate(sch.mod)
        return estimates[key_of(sch)].latency_s

    def geometry(sch):
        latency(sch)
        return kernel_geometry(estimates[key_of(sch)].features)

    samples = space.sample(8, seed=5)
    best = min(samples, key=latency)
    base = best.trace.simplified(remove_postproc=True)
    unroll = [inst for inst, kind in zip([i for i in base.insts if i in base.decisions], decision_kinds(base))
              if kind == "meta_schedule.unroll_explicit"]
    moves = [(inst, value) for inst, value in neighbour_decisions(base) if any(inst.same_as(u) for u in unroll)]
    kin = space.replay_valid([base.with_decision(inst, value, remove_postproc=True) for inst, value in moves],
                             random.Random(1))
    assert kin and geometry(kin[0]) == geometry(best)
    draft = samples + kin[:1]
    families = {decisions_but_operand_fetches(s.trace) for s in (best, kin[0])}
    assert len(families) == 2

    def variants_of(members):
        # No climbing steps: the geometry's members are the draft's two (the climb has its own test).
        climbed, variants, arranged = cold_climb(draft, space, latency, geometry, key_of, set(), starts=1, steps=0,
                                                 moves_per_step=0, rng=random.Random(0), members=members)
        assert not climbed and not arranged
        assert not {key_of(v) for v in variants} & {key_of(s) for s in draft + climbed}
        return climbed, variants

    _, variants = variants_of(2)
    assert {decisions_but_operand_fetches(v.trace) for v in variants} == families
    assert all(geometry(v) == geometry(best) for v in variants)
    _, alone = variants_of(1)
    assert {decisions_but_operand_fetches(v.trace) for v in alone} == {decisions_but_operand_fetches(best.trace)}


def test_cold_round_caps_the_picks_of_one_geometry(tensor_intrinsics):
    """Variants differing only in categorical decisions (fetch width, unroll) are one kernel geometry;
    members of a geometry past the cap go behind every other geometry's, rank order kept in each part."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.analysis import kernel_geometry
    from ms_pruner.search.first_round.geometry import capped_per_group
    from ms_pruner.search.mutator import MutateCategorical

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    analyzer = StaticAnalyzer.for_target(target)
    base, *others = space.sample(4, seed=5)
    mutator = MutateCategorical(seed=1)
    variants = []
    for _ in range(40):
        sch = space.replay(mutator.apply(base.trace.simplified(remove_postproc=True)), seed=1)
        if sch is not None:
            variants.append(sch)
    geometry = kernel_geometry(analyzer.estimate(base.mod).features)
    assert geometry is not None and len(variants) >= 3
    assert all(kernel_geometry(analyzer.estimate(v.mod).features) == geometry for v in variants)
    assert len({analyzer.estimate(v.mod).latency_s for v in variants}) > 1, "variants the analyzer tells apart"
    assert len({kernel_geometry(analyzer.estimate(s.mod).features) for s in [base] + others}) > 1

    ranked = ["a1", "a2", "b1", "a3", "c1", "a4", "b2", "b3"]
    group = str.__getitem__
    assert capped_per_group(ranked, 2, lambda x: group(x, 0), len(ranked)) == \
        ["a1", "a2", "b1", "c1", "b2", "a3", "a4", "b3"]
    asked = []
    head = capped_per_group(ranked, 1, lambda x: asked.append(x) or group(x, 0), 2)
    assert head[:2] == ["a1", "b1"] and sorted(head) == sorted(ranked) and asked == ["a1", "a2", "b1"]
