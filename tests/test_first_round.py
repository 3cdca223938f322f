"""The first-round (cold) policy's rounds: a GPU cold round's draft, climb and ptxas tie order, and the
follow-up slices of a split cold batch, on an H100 target (nothing measured) and on llvm (measured).
Its moves one by one (widening, climb, reshape, the geometry cap): test_first_round_moves.py."""

import collections

import pytest

from ms_pruner.search import FirstRoundConfig, PrunerConfig
from ms_pruner.search.config import TARGET_DEFAULTS
from ms_pruner.workloads import parse_workload
from conftest import distinct_schedules, needs_nvcc

SPEC = "matmul:64x64x64:float32:float32"


def _cold_h100_round(first_round: FirstRoundConfig = FirstRoundConfig(), **settings):
    """A PrunerSearch before its cold round on the 1024^3 fp16 matmul for the H100 (small draft,
    ``settings`` of PrunerConfig)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import PrunerSearch

    config = PrunerConfig(**dict(dict(cold_population=64, cold_genetic_iters=2, draft_size=64), **settings))
    strategy = PrunerSearch(config, first_round, seed=0)
    mod = tvm.IRModule({"main": parse_workload("matmul:1024x1024x1024:float16:float32").prim_func()})
    context = ms.TuneContext(mod=mod, target=get_gpu_spec("h100").target(), space_generator="post-order-apply",
                             search_strategy=strategy, task_name="main", rand_state=0, num_threads=2)
    context.pre_tuning(max_trials=32, num_trials_per_iter=16, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=PaCM(seed=0))
    return strategy, context


@pytest.mark.slow
def test_gpu_cold_round_climbs_on_the_analyzer(tensor_intrinsics):
    """By default a GPU cold round samples through the screen and climbs: new schedules join the
    draft, the cold half of the batch is full and distinct, and its best pick is estimated no slower
    than any draft member left unpicked. The draft's candidates share most of their copy blocks,
    whose facts the analyzer computes once."""
    import tvm_ffi

    strategy, context = _cold_h100_round()
    picks = context.search_strategy.generate_measure_candidates()
    timing = strategy.timings[-1]
    assert timing["climbed"] > 0 and timing["climb_s"] > 0 and timing["draft"] + timing["climbed"] > 64
    # The draft's mutators skipped the children it had met, drawing others instead (mutator.py).
    assert timing["draft_children"] > 0 and timing["draft_children_skipped"] > 0
    # Its fresh samples come from the screened sampler, which replayed only some of its draws.
    assert timing["population"] == TARGET_DEFAULTS["cold_samples"]["gpu"] <= timing["sample_valid"] < timing["sample_replayed"] \
        < timing["sample_drawn"]
    # The draft's and the climb's (the screened sampler's random schedules share fewer copy blocks).
    assert 0 < timing["copies_computed"] - timing["sample_copies_computed"] \
        < (timing["copies_walked"] - timing["sample_copies_walked"]) / 2
    assert len({int(tvm_ffi.structural_hash(c.sch.mod)) for c in picks}) == len(picks) == 8  # half of 16
    searched = strategy
    best_pick = min(searched.analyzer.estimate(c.sch.mod).latency_s for c in picks)
    best_carried = min((searched.analyzer.estimate(s.mod).latency_s for s in searched.carry), default=float("inf"))
    assert best_pick <= best_carried


@needs_nvcc
@pytest.mark.slow
def test_gpu_cold_round_compiles_its_favourite_ties_and_picks_by_registers(tensor_intrinsics):
    """Where nvcc is on PATH a GPU cold round compiles its favourite geometry's tied members
    (search/ptxas_ties.py) once each, and among the picks of that geometry one ptxas allots clearly
    fewer registers than the ties' median comes first when the round promoted any (this round's 10
    ties get 124-148 registers and none is promoted; test_batch.py checks the order itself)."""
    import statistics

    from ms_pruner.analysis import kernel_geometry
    from ms_pruner.search.first_round.ptxas_ties import REGISTER_MARGIN

    strategy, context = _cold_h100_round()
    picks = context.search_strategy.generate_measure_candidates()
    timing = strategy.timings[-1]
    searched = strategy
    assert 0 < timing["ptxas_reported"] <= timing["ptxas_compiled"] == len(searched.first_round.tie_order.reports) <= 64
    assert timing["ptxas_s"] > 0 and 0 <= timing["ptxas_promoted"] <= timing["ptxas_reported"]
    # Picks it compiled: the builder's workers take their cubins from the run's shared folder.
    compiled = [c for c in picks if searched.first_round.tie_order.reports.get(searched.facts.key(c.sch)) is not None]
    assert 0 < timing["ptxas_picked"] == len(compiled) <= len(picks)
    reports = [r for r in searched.first_round.tie_order.reports.values() if r is not None]
    median = statistics.median(r.registers for r in reports)
    favourite = kernel_geometry(searched.analyzer.estimate(picks[0].sch.mod).features)
    registers = [searched.first_round.tie_order.reports.get(searched.facts.key(c.sch)) for c in picks
                 if kernel_geometry(searched.analyzer.estimate(c.sch.mod).features) == favourite]
    low = [i for i, r in enumerate(registers) if r is not None and r.registers <= median - REGISTER_MARGIN]
    assert (low[0] == 0) if timing["ptxas_promoted"] else not low


@pytest.mark.slow
def test_gpu_draft_evolves_with_the_categorical_mutator(tensor_intrinsics):
    """On a GPU target the cold draft's evolution draws MutateCategorical (20% of mutations), from
    MetaSchedule's C++ threads, and the round still yields a full batch of distinct picks, spread
    over the draft's kernel geometries. The analyzer climb is off here: its schedules keep their
    starts' (wide) fetch draws, and this checks what the categorical mutator and widening do. The
    cold round measures the whole batch here, so that the cap (half of it) leaves room for several.
    Without the climb's variants, whether a geometry holds tied variants is the draft's luck: this
    round starts from MetaSchedule's C++ sampler, whose seed-0 draft holds them (the screened
    sampler's seed-0 draft of 128 does not, its seeds 1 and 2 do; test_screen.py covers it)."""
    import tvm_ffi

    strategy, context = _cold_h100_round(FirstRoundConfig(cold_climb_starts=0, cold_batch_share=1), screen_samples=0,
                                         cold_samples=50, skip_seen_children=0)  # unwrapped, the mutators' kinds are seen here
    probs = {type(m).__name__: float(p)
             for m, p in strategy.draft.context.space_generator.mutator_probs.items()}
    assert abs(probs.pop("_PyMutator") - 0.2) < 1e-6 and abs(sum(probs.values()) - 0.8) < 1e-6
    picks = context.search_strategy.generate_measure_candidates()
    assert len(picks) == 16
    assert len({int(tvm_ffi.structural_hash(c.sch.mod)) for c in picks}) == 16
    # The cold batch's cap: 8 best-ranked picks per kernel geometry, plus the 2 eps-greedy ones.
    searched = strategy
    assert searched.first_round.geometry_cap(16) == 8
    per_geometry = collections.Counter(searched.facts.geometry(c.sch) for c in picks)
    draft_geometries = set(per_geometry) | {searched.facts.geometry(s) for s in searched.carry}
    assert len(draft_geometries) >= 4, "the draft should offer the batch several geometries"
    assert max(per_geometry.values()) <= 8 + 2 and len(per_geometry) >= 2, per_geometry
    # Picks left with a narrow operand fetch are those whose widest-fetch variant was no use.
    from ms_pruner.analysis import has_narrow_fetch
    from ms_pruner.search.first_round.fetch_width import widest_fetch_variant

    timing = strategy.timings[-1]
    assert "widen_s" in timing and 0 <= timing["widened"] <= len(picks)
    keys = {int(tvm_ffi.structural_hash(c.sch.mod)) for c in picks}
    for candidate in picks:
        estimate = searched.analyzer.estimate(candidate.sch.mod)
        if has_narrow_fetch(estimate.features):
            wide = widest_fetch_variant(searched.space, candidate.sch.trace, seed=1)
            assert wide is None or int(tvm_ffi.structural_hash(wide.mod)) in keys or \
                searched.analyzer.estimate(wide.mod).latency_s > estimate.latency_s
    # Within a geometry, the wide fetch-width variants estimated within the band of its best take its
    # capped picks in turn (widening only replaces narrow picks, so it leaves these alone).
    from ms_pruner.analysis import operand_fetch_bytes

    picked_schedules = [c.sch for c in picks]
    pool = picked_schedules + list(searched.carry)
    estimates = {id(s): searched.analyzer.estimate(s.mod) for s in pool}
    best = collections.defaultdict(lambda: float("inf"))
    for sch in pool:
        best[searched.facts.geometry(sch)] = min(best[searched.facts.geometry(sch)], estimates[id(sch)].latency_s)
    band = searched.first_round.config.cold_variant_band
    spread = 0
    for geometry, count in per_geometry.items():
        members = [s for s in pool if searched.facts.geometry(s) == geometry]
        tied = {operand_fetch_bytes(estimates[id(s)].features) for s in members
                if estimates[id(s)].latency_s <= best[geometry] * (1 + band)
                and not has_narrow_fetch(estimates[id(s)].features)}
        picked = {operand_fetch_bytes(estimates[id(s)].features) for s in picked_schedules
                  if searched.facts.geometry(s) == geometry}
        assert len(picked & tied) >= min(len(tied), count - 2, 4), (geometry, tied, picked)  # 2: eps-greedy picks
        spread += len(picked & tied) > 1
    assert spread > 0, "some geometry's picks should cover tied variants"


@pytest.mark.slow
def test_without_the_first_round_policy_a_gpu_cold_round_is_plain_pruner(tensor_intrinsics):
    """``first_round=None`` (``--no-first-round``): the cold round measures its whole batch, ranked
    by the analyzer and the cost model alone: no climb, no geometry cap or family floor, no widening,
    nothing left to a follow-up; the draft keeps Pruner's cold settings (sharper parents, screen)."""
    import tvm_ffi

    strategy, context = _cold_h100_round(first_round=None)
    picks = context.search_strategy.generate_measure_candidates()
    timing = strategy.timings[-1]
    assert len({int(tvm_ffi.structural_hash(c.sch.mod)) for c in picks}) == len(picks) == 16
    assert strategy.follow_up is None and strategy.first_round is None
    assert not {"climb_s", "widen_s", "families", "follow_up_due", "ptxas_compiled"} & set(timing)
    assert timing["selection_power"] == TARGET_DEFAULTS["cold_selection_power"]["gpu"] and timing["sample_drawn"] > 0
    assert timing["settings"] == {"cold_population": 64, "cold_genetic_iters": 2, "draft_size": 64, "first_round": False}


@pytest.mark.slow
def test_gpu_follow_up_measures_the_rest_of_the_cold_batch_around_its_best_in_slices(tensor_intrinsics):
    """A GPU cold round measures half a batch; with its results in, the follow-up measures the other
    half in two rounds (``follow_up_slices``) without sampling or evolving: half of each slice
    neighbours of the best schedule measured so far (one decision apart), the rest the cold draft's
    unpicked members, under a geometry cap spanning the whole batch; each round logs what the next
    owes; nothing measured twice, and nothing left pending. No GPU here: the latencies fed back are
    the analyzer's estimates, standing in for a runner's; what the strategy does with them is what
    is checked."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from ms_pruner.search import decision_values, steps_apart

    strategy, context = _cold_h100_round()
    searched = strategy
    measured, latencies = [], []

    def measure(candidates):
        latency = [searched.analyzer.estimate(c.sch.mod).latency_s for c in candidates]
        context.search_strategy.notify_runner_results(
            candidates, [RunnerResult(run_secs=[s], error_msg=None) for s in latency])
        measured.extend(candidates)
        latencies.extend(latency)

    cold = list(context.search_strategy.generate_measure_candidates())
    assert len(cold) == 8 and "follow_up" not in strategy.timings[-1] and strategy.timings[-1]["follow_up_due"] == 4
    measure(cold)
    slices = []
    for number, due in ((1, 4), (2, None)):
        best = measured[latencies.index(min(latencies))]
        follow = list(context.search_strategy.generate_measure_candidates())
        timing = strategy.timings[-1]
        assert timing["follow_up"] and timing["round"] == number and len(follow) == 4
        assert timing.get("follow_up_due") == due
        assert timing["population"] == 0 and timing["sample_s"] == 0 and timing["draft"] > 0 and timing["droplet"] >= 2
        base = decision_values(best.sch.trace)
        one_apart = [c for c in follow if steps_apart(decision_values(c.sch.trace), base) == 1]
        assert len(one_apart) >= 2, "half of each slice is the best's Droplet neighbours"
        slices.append((follow, one_apart))
        if number == 1:  # the slice's Droplet neighbours count toward no geometry cap, now or in the next slice
            assert sum(searched.follow_up.geometries.values()) < len(cold) + len(follow)
        measure(follow)
    keys = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in measured]
    assert len(set(keys)) == 16
    # The cap (half of the 16) spans the batch; each of its three rounds may add its eps-greedy random pick.
    others = cold + [c for follow, one_apart in slices for c in follow if not any(c is n for n in one_apart)]
    per_geometry = collections.Counter(searched.facts.geometry(c.sch) for c in others)
    assert max(per_geometry.values()) <= 8 + 3, per_geometry
    assert searched.follow_up is None


@pytest.mark.slow
def test_gpu_cold_half_that_measured_nothing_leaves_its_rest_to_one_cold_round(tensor_intrinsics):
    """With no valid result from the cold half there is no best to follow up: the next round searches
    cold again for the other half of the batch, whole (it was halved once already), and leaves nothing
    pending. Before, it halved that rest again and left another follow-up pending, so the cold rounds
    of a run whose kernels kept failing shrank by half each time."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    strategy, context = _cold_h100_round(FirstRoundConfig(cold_climb_starts=0))
    cold = list(context.search_strategy.generate_measure_candidates())
    assert len(cold) == 8 and strategy.follow_up is not None
    context.search_strategy.notify_runner_results(
        cold, [RunnerResult(run_secs=None, error_msg="launch failed") for _ in cold])
    again = list(context.search_strategy.generate_measure_candidates())
    timing = strategy.timings[-1]
    assert len(again) == 8 and not timing.get("follow_up") and timing["population"] > 0
    assert strategy.follow_up is None
    assert not {int(tvm_ffi.structural_hash(c.sch.mod)) for c in cold} & {
        int(tvm_ffi.structural_hash(c.sch.mod)) for c in again}


@pytest.mark.slow
def test_split_cold_batch_then_a_resumed_call_on_llvm(tmp_path):
    """``cold_batch_share=0.5`` with the real builder and runner: the cold round measures half a
    batch, the follow-up the other half in two slices (no sampling; neighbours of the best), then whole rounds; a
    resumed call goes on counting rounds, so Droplet (from round ``droplet_after`` = 2) is on at once."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import make_builder, make_runner
    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import PrunerSearch
    from ms_pruner.tuning.driver import metaschedule_logging_guard

    workload = parse_workload(SPEC)

    def tune(trials):
        timings = []
        with metaschedule_logging_guard():
            ms.tune_tir(mod=workload.prim_func(), target=llvm_target(), work_dir=str(tmp_path),
                        max_trials_global=trials, num_trials_per_iter=8, builder=make_builder("pruner", max_workers=2),
                        runner=make_runner(), cost_model=PaCM(seed=0, time_budget_s=2.0),
                        strategy=PrunerSearch(PrunerConfig(population=64, cold_population=64, draft_size=32),
                                              FirstRoundConfig(cold_batch_share=0.5), seed=0, timings=timings))
        return timings

    first = tune(16)
    assert [t["picked"] for t in first] == [4, 2, 2, 8]
    assert [bool(t.get("follow_up")) for t in first] == [False, True, True, False]
    assert [t.get("follow_up_due") for t in first] == [2, 2, None, None]
    assert all(t["population"] == 0 and t["droplet"] > 0 for t in first[1:3]) and first[3]["population"] > 0
    resumed = tune(8)
    assert resumed[0]["round"] == 2 and resumed[0]["droplet"] > 0 and not resumed[0].get("follow_up")
    records, hashes = distinct_schedules(str(tmp_path), workload)
    assert len(records) == 24 and len(set(hashes)) == 24


@pytest.mark.slow
def test_a_call_resumed_after_the_cold_half_measures_the_rest_of_its_batch_first(tmp_path):
    """A time-limited call can end between the cold half and its follow-up (a time limit with no time
    for the follow-up). The next call finds the cold half's records alone: its first rounds are the
    follow-up's two slices, the rest of that batch (a warm draft standing in for the cold draft the
    last process held, and neighbours of the best), so the run's batches stay aligned with stock's;
    then whole ones."""
    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import PrunerSearch
    from ms_pruner.tuning.driver import tune_tir
    from ms_pruner.tuning.interrupt import TimeLimitReached, set_time_limit

    workload = parse_workload(SPEC)

    def tune(trials, time_limit=None):
        timings = []
        search = PrunerSearch(PrunerConfig(population=64, cold_population=64, draft_size=32),
                              FirstRoundConfig(cold_batch_share=0.5), seed=0, timings=timings)
        set_time_limit(time_limit)
        try:
            tune_tir(workload.prim_func(), llvm_target(), str(tmp_path), trials, num_trials_per_iter=8, seed=0,
                     progress=False, search=(search, PaCM(seed=0, time_budget_s=2.0)))
        except TimeLimitReached:
            assert time_limit is not None
        finally:
            set_time_limit(None)
        return timings

    first = tune(16, time_limit=0.5)
    assert [(t["picked"], t.get("follow_up_due")) for t in first] == [(4, 2)]
    resumed = tune(16)
    assert [(t["picked"], bool(t.get("follow_up"))) for t in resumed] == [(2, True), (2, True), (8, False)]
    assert resumed[0]["round"] == 1 and resumed[0]["population"] > 0 and resumed[0]["droplet"] > 0
    records, hashes = distinct_schedules(str(tmp_path), workload)
    assert len(records) == 16 and len(set(hashes)) == 16


def test_follow_up_slices_and_what_a_resumed_call_still_owes():
    """The rest of a split batch in even slices, larger first; a call resumed inside the first batch
    owes the slices not yet measured (the first shortened by trials past a slice's end), and nothing
    once the batch is complete or was never split; the geometry counts grow with each slice's picks."""
    from ms_pruner.search.first_round.follow_up import FollowUp, resumed_follow_up, slice_sizes

    assert slice_sizes(32, 2) == [16, 16] and slice_sizes(5, 2) == [3, 2] and slice_sizes(1, 3) == [1]
    assert slice_sizes(32, 1) == [32] and slice_sizes(7, 0) == [7]
    assert resumed_follow_up(64, 32, 32, 2, ["a"]).sizes == [16, 16]
    assert resumed_follow_up(64, 32, 48, 2, ["a"]).sizes == [16]
    assert resumed_follow_up(64, 32, 40, 2, ["a"]).sizes == [8, 16]
    resumed = resumed_follow_up(64, 32, 56, 2, ["a", "a", "b"])
    assert resumed.sizes == [8] and resumed.resumed and resumed.geometries == {"a": 2, "b": 1}
    assert resumed_follow_up(64, 32, 64, 2, ["a"]) is None and resumed_follow_up(64, 32, 20, 2, ["a"]) is None
    assert resumed_follow_up(64, 64, 40, 2, ["a"]) is None
    pending = FollowUp([16, 16], collections.Counter({"a": 8}), resumed=True)
    after = pending.after(["a", "b"])
    assert after.sizes == [16] and after.geometries == {"a": 9, "b": 1} and not after.resumed and after.trials == 16
    assert after.after(["b"]) is None
