"""Two rule families in one search: the cold round's family floor and the families its draft brings
back, Pruner's samplers drawing a family first, each family climbing from its own geometries, and a
round on the `all` space proposing both, every proposal built (no GPU needed)."""

import collections

import pytest

from conftest import needs_nvcc, workload_space
from ms_pruner.workloads import parse_workload

GEMM = "matmul:4096x4096x4096:float16:float32"


def test_family_floor_trades_the_lowest_picks_for_the_missing_family():
    from ms_pruner.search.first_round.families import with_family_floor

    picks = ["w1", "w2", "w3", "w4", "w5", "w6"]
    rest = ["w7", "m1", "w8", "m2", "m3"]
    family = lambda name: name[0]  # noqa: E731
    floored, left = with_family_floor(picks, rest, family, 2)
    assert floored == ["w1", "w2", "w3", "w4", "m1", "m2"]
    assert left[:2] == ["w5", "w6"] and "m1" not in left and "m3" in left
    assert with_family_floor(picks, ["w7"], family, 2) == (picks, ["w7"])
    # A family above its floor gives way only down to the floor.
    assert with_family_floor(["w1", "w2", "w3"], ["m1", "m2"], family, 2)[0] == ["w1", "w2", "m1"]


def test_family_floor_takes_the_short_family_in_the_order_given():
    """The pruner passes an order that takes each kernel geometry's best first, so a floor of two
    is not two variants of one tiling."""
    from ms_pruner.search.first_round.families import with_family_floor
    from ms_pruner.search.first_round.geometry import capped_per_group

    family = lambda name: name[0]  # noqa: E731
    geometry = lambda name: name[1]  # noqa: E731
    one_a_geometry = lambda members: capped_per_group(members, 1, geometry, len(members))  # noqa: E731
    picks, rest = ["wa1", "wa2", "wb1", "wb2"], ["mx1", "mx2", "mx3", "my1"]
    assert with_family_floor(picks, rest, family, 2)[0] == ["wa1", "wa2", "mx1", "mx2"]
    floored, left = with_family_floor(picks, rest, family, 2, one_a_geometry)
    assert floored == ["wa1", "wa2", "mx1", "my1"] and left == ["wb1", "wb2", "mx2", "mx3"]


def test_a_family_the_draft_lost_comes_back_from_the_population():
    from ms_pruner.search.first_round.families import with_population_families

    family, latency, key = (lambda name: name[0]), (lambda name: int(name[1:])), (lambda name: name)  # noqa: E731
    draft, population = ["w1", "w2", "w3"], ["w1", "w2", "w3", "w9", "m7", "m4", "m5", "m4", "m6"]
    assert with_population_families(draft, population, family, 2, latency, key, set()) == draft + ["m4", "m5"]
    assert with_population_families(draft, population, family, 2, latency, key, {"m4"}) == draft + ["m5", "m6"]
    # A family at its floor in the draft, or absent from the population, is left as it is.
    at_floor = draft + ["m6", "m7"]
    assert with_population_families(at_floor, population, family, 2, latency, key, set()) == at_floor
    assert with_population_families(draft, draft, family, 2, latency, key, set()) == draft


def test_the_cold_draft_keeps_each_family_the_population_holds(tensor_intrinsics):
    """The cold round's evolution selects on the analyzer alone: with PrunerSearch's defaults on two
    threads, the H100 ``all`` space of an fp16 ``matmul_nt`` gave a draft with no mma kernel,
    although its samples held some (most spill, and the analyzer puts them far behind), so the
    family floor had nothing to measure and the round picked 32 WMMA kernels (``cold_rounds``). The first-round policy brings a lost family's best-estimated
    samples back before it climbs."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import FirstRoundConfig, PrunerConfig, PrunerSearch
    from ms_pruner.search.stats import RoundStats
    from ms_pruner.space import sketch_family, tuning_space

    mod = tvm.IRModule({"main": parse_workload("matmul_nt:2048x2304x768:float16:float32").prim_func()})
    _, target, generator = tuning_space("all", mod, get_gpu_spec("h100").target())
    strategy = PrunerSearch(PrunerConfig(cold_population=64), FirstRoundConfig(cold_climb_starts=0), seed=0)
    context = ms.TuneContext(mod=mod, target=target, space_generator=generator, search_strategy=strategy,
                             task_name="main", rand_state=0, num_threads=2)
    context.pre_tuning(max_trials=64, num_trials_per_iter=32, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=PaCM(seed=0))
    population = strategy.space.sample(48, 0)
    mma = [s for s in population if sketch_family(s.trace) == "mma"]
    wmma_draft = [s for s in population if sketch_family(s.trace) == "wmma"]
    assert mma and wmma_draft
    stats = RoundStats({})
    draft = strategy.first_round.expand_draft(wmma_draft, 32, set(), stats, population)
    added = draft[len(wmma_draft):]
    estimate = lambda s: strategy.facts.estimate(s).latency_s  # noqa: E731
    assert len(added) == stats["population_families"] == min(8, len(mma))  # a quarter of the batch
    assert {sketch_family(s.trace) for s in added} == {"mma"}
    assert max(map(estimate, added)) <= min(estimate(s) for s in mma if s not in added)


@needs_nvcc
@pytest.mark.slow
def test_a_pruner_round_on_both_families_proposes_each_and_every_proposal_builds(tensor_intrinsics):
    """One cold PrunerSearch round on the ``all`` space for the H100 (nothing measured): the analyzer
    ranks both families on one scale, the batch holds each family's floor, and every candidate it
    proposes lowers and compiles."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.evaluation.space_report import build_report
    from ms_pruner.search import FirstRoundConfig, PrunerConfig, PrunerSearch
    from ms_pruner.space import sketch_family, tuning_space

    mod = tvm.IRModule({"main": parse_workload(GEMM).prim_func()})
    _, target, generator = tuning_space("all", mod, get_gpu_spec("h100").target())
    strategy = PrunerSearch(PrunerConfig(cold_population=64, cold_genetic_iters=1, draft_size=64),
                            FirstRoundConfig(cold_ptxas_ties=0), seed=0)
    context = ms.TuneContext(mod=mod, target=target, space_generator=generator, search_strategy=strategy,
                             task_name="main", rand_state=0, num_threads=2)
    context.pre_tuning(max_trials=32, num_trials_per_iter=16, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=PaCM(seed=0))
    picks = context.search_strategy.generate_measure_candidates()
    families = collections.Counter(sketch_family(c.sch.trace) for c in picks)
    assert len(picks) == 8 and families["mma"] >= 2 and families["wmma"] >= 2
    assert strategy.timings[-1]["families"] == {k: v for k, v in families.items()}
    for candidate in picks:
        assert build_report(candidate.sch, target)["status"] == "built"


@pytest.mark.slow
def test_a_default_cold_round_on_sixteen_threads_keeps_both_families(tensor_intrinsics):
    """The cold round as a 16-core GPU host runs it (PrunerSearch's defaults, H200 target). Its draft
    of ~660 can rank one family far below the other: on 2026-11-27 an H200 run measured 256 WMMA
    kernels and no mma one. The carry keeps each family's share, so the floor holds a quarter of
    the batch for each family, and what the floor brings in is of different kernel geometries as
    far as the carry holds them (each family's climb fills the carry's share with a few geometries'
    members). Each instruction of the draft (wmma, m16n8k8, m16n8k16) climbs from its own best
    geometries, and the mma ones' best tilings are tried on each other's sketch. A 16-thread
    evolution is not deterministic; which family the floor serves varies."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry
    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import PrunerSearch
    from ms_pruner.space import sketch_family, tuning_space

    mod = tvm.IRModule({"main": parse_workload(GEMM).prim_func()})
    _, target, generator = tuning_space("all", mod, get_gpu_spec("h200").target())
    strategy = PrunerSearch(seed=0)
    context = ms.TuneContext(mod=mod, target=target, space_generator=generator, search_strategy=strategy,
                             task_name="main", rand_state=0, num_threads=16)
    context.pre_tuning(max_trials=256, num_trials_per_iter=64, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=PaCM(seed=0))
    picks = [c.sch for c in context.search_strategy.generate_measure_candidates()]
    families = collections.Counter(sketch_family(s.trace) for s in picks)
    assert len(picks) == 32 and families["mma"] >= 8 and families["wmma"] >= 8  # the floor: a quarter each
    analyzer = StaticAnalyzer.for_target(target)
    geometry = {id(s): kernel_geometry(analyzer.analyze(s)[1].features) for s in picks}
    random_picks = int(round(32 * strategy.settings.eps_greedy))  # drawn from the draft past the cap
    assert max(collections.Counter(geometry.values()).values()) <= 16 + random_picks  # cold_geometry_share: half
    assert set(strategy.timings[-1]["climbed_by_group"]) == {"wmma", "m16n8k8", "m16n8k16"}  # each climbed
    assert strategy.timings[-1]["transplanted"] > 0  # each mma instruction's best tilings tried on the other's
    for family, brought in strategy.timings[-1]["family_floor"].items():
        assert families[family] == 8  # the floor brings in what the family lacks, no more
        spread = {geometry[id(s)] for s in picks if sketch_family(s.trace) == family}
        left = {kernel_geometry(analyzer.analyze(s)[1].features) for s in strategy.carry
                if sketch_family(s.trace) == family}
        assert len(spread) >= min(brought, len(spread | left))  # a geometry's best first, then seconds


def test_pruners_samplers_draw_each_family_as_often_as_the_other(tensor_intrinsics):
    """``DesignSpace.pick_sketch``: on ``all`` (two WMMA sketches, six mma ones) each family gets
    half the draws and every sketch some; with one family it is MetaSchedule's uniform draw, draw
    for draw (the seeded rounds of tests/test_golden_round.py rely on that)."""
    import random

    _, _, space = workload_space(GEMM, "all")
    rng = random.Random(0)
    picks = collections.Counter(space.pick_sketch(rng) for _ in range(4000))
    families = collections.Counter()
    for index, times in picks.items():
        families[space.sketch_families[index]] += times
    assert set(picks) == set(range(len(space.sketches))) and families.keys() == {"wmma", "mma"}
    assert abs(families["wmma"] - families["mma"]) < 200
    _, _, wmma = workload_space(GEMM, "wmma")
    a, b = random.Random(1), random.Random(1)
    assert [wmma.pick_sketch(a) for _ in range(50)] == [b.randrange(len(wmma.sketches)) for _ in range(50)]


def test_each_rule_family_climbs_from_its_own_best_geometries(tensor_intrinsics):
    """``climb.cold_climb`` on a draft of both families and both mma instructions: grouped by
    ``rule_family``, each family's best geometry is a climb start (so the family floor's picks of the
    family ranked second are climbed ones too), and grouped by instruction each of wmma, m16n8k8 and
    m16n8k16 climbs; without a grouping, one start of the kind ranked first. A tile move keeps the
    sketch, so a climb stays in its family and instruction."""
    import random

    import tvm_ffi

    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry
    from ms_pruner.search.first_round.climb import cold_climb
    from ms_pruner.space import sketch_family, tensor_instruction

    _, target, space = workload_space("matmul:1024x1024x1024:float16:float32", "all")
    analyzer = StaticAnalyzer.for_target(target)
    estimates = {}

    def estimate(sch):
        key = int(tvm_ffi.structural_hash(sch.mod))
        if key not in estimates:
            estimates[key] = analyzer.estimate(sch.mod)
        return estimates[key]

    draft = space.sample(16, seed=2)
    family = lambda sch: sketch_family(sch.trace)  # noqa: E731
    instruction = lambda sch: tensor_instruction(sch.trace)  # noqa: E731
    best = min(draft, key=lambda s: estimate(s).latency_s)
    best_mma = min((s for s in draft if family(s) == "mma"), key=lambda s: estimate(s).latency_s)
    assert {instruction(s) for s in draft} == {"wmma", "m16n8k8", "m16n8k16"}

    def climbed(group):
        schedules, _, _ = cold_climb(
            draft, space, lambda s: estimate(s).latency_s, lambda s: kernel_geometry(estimate(s).features),
            lambda s: int(tvm_ffi.structural_hash(s.mod)), set(), starts=1, steps=1, moves_per_step=12,
            rng=random.Random(0), rule_family=group)
        return {instruction(s) for s in schedules}

    assert climbed(None) == {instruction(best)}
    assert climbed(family) == {"wmma", instruction(best_mma)}
    assert climbed(instruction) == {"wmma", "m16n8k8", "m16n8k16"}
