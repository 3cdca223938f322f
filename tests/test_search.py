"""PrunerSearch end to end on llvm with the real builder and runner, and Droplet neighbours."""

import collections
import json
import os

import numpy as np
import pytest

from ms_pruner.cli import main
from ms_pruner.search import FirstRoundConfig, PrunerConfig
from ms_pruner.search.config import TARGET_DEFAULTS
from ms_pruner.workloads import parse_workload
from conftest import H100_MM4096, needs_h100_data, needs_nvcc

SPEC = "matmul:64x64x64:float32:float32"


def _distinct_schedules(work_dir, workload):
    """Structural hashes of every record's replayed schedule in the work dir."""
    import tvm_ffi

    from ms_pruner.database import replay_record
    from ms_pruner.tuning import open_database

    records = open_database(work_dir).get_all_tuning_records()
    hashes = [int(tvm_ffi.structural_hash(replay_record(r).mod)) for r in records]
    return records, hashes


def _run_best(work_dir, workload, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.tuning import open_database

    sch = ms.tir_integration.compile_tir(open_database(work_dir), workload.prim_func(), target)
    lib = tvm.compile(sch.mod, target=target)
    inputs = workload.random_inputs(seed=1)
    out = tvm.runtime.tensor(np.zeros(workload.output_shape(), dtype=workload.out_dtype))
    lib(*[tvm.runtime.tensor(x) for x in inputs], out)
    return out.numpy(), workload.reference(inputs)


@pytest.mark.slow
def test_pruner_search_in_tune_tir(tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import make_builder, make_runner
    from ms_pruner.cost_model import PaCM
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import PrunerSearch
    from ms_pruner.tuning.driver import metaschedule_logging_guard

    workload = parse_workload(SPEC)
    target = llvm_target()
    timings = []
    strategy = PrunerSearch(PrunerConfig(population=64, cold_population=64, draft_size=32, droplet_after=1), seed=0,
                            timings=timings)
    with metaschedule_logging_guard():  # pytest's log handlers crash tune_tir's logging setup
        ms.tune_tir(
            mod=workload.prim_func(),
            target=target,
            work_dir=str(tmp_path),
            max_trials_global=32,
            num_trials_per_iter=8,
            builder=make_builder("pruner", max_workers=2),
            runner=make_runner(),
            cost_model=PaCM(seed=0, time_budget_s=2.0),
            strategy=strategy,
        )
    records, hashes = _distinct_schedules(str(tmp_path), workload)
    assert len(records) == 32
    assert len(set(hashes)) == 32, "a schedule was measured twice"
    got, want = _run_best(str(tmp_path), workload, target)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(timings) == 4
    assert all(t["draft"] > 0 and t["picked"] == 8 for t in timings)
    assert any(t["droplet"] > 0 for t in timings[1:])
    assert timings[0]["carried"] == 0 and all(t["carried"] > 0 for t in timings[1:])
    cold, warm = TARGET_DEFAULTS["cold_genetic_iters"]["cpu"], PrunerConfig().genetic_iters
    assert cold > warm and [t["generations"] for t in timings] == [cold] + [warm] * 3
    assert not any("draft_children" in t for t in timings)  # a CPU draft does not skip repeated children
    assert [t["selection_power"] for t in timings] == [TARGET_DEFAULTS["cold_selection_power"]["cpu"]] + [1.0] * 3
    assert not any("climb_s" in t for t in timings)  # the analyzer climb is for GPU cold rounds only


@pytest.mark.slow
def test_cli_tune_with_pruner_strategy(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    assert main(["tune", SPEC, "--target", "llvm", "--strategy", "pruner", "--trials", "32", "--per-iter", "16",
                 "--work-dir", work_dir, "--seed", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "32 records (32 new)" in out and "draft" in out and "verify" in out
    workload = parse_workload(SPEC)
    records, hashes = _distinct_schedules(work_dir, workload)
    assert len(records) == 32 and len(set(hashes)) == 32
    from ms_pruner.hardware import llvm_target

    got, want = _run_best(work_dir, workload, llvm_target())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    rounds = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    assert len(rounds) == 2 and rounds[1]["strategy"]["droplet"] == 0  # Droplet from round 2 (droplet_after)
    for entry in rounds:
        assert {"sample_s", "draft_s", "verify_s", "droplet_s"} <= set(entry["strategy"])
        assert "settings" not in entry["strategy"]


@pytest.mark.slow
def test_set_changes_a_pruner_setting_by_name_and_the_round_log_names_it(tmp_path, capsys):
    """``--set NAME=VALUE`` reaches PrunerSearch: Droplet's neighbours join the batch from round 1
    instead of round 2, and every round's log names the settings that differ from the defaults."""
    work_dir = str(tmp_path / "wd")
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "16", "--per-iter", "8", "--work-dir", work_dir,
                 "--seed", "0", "--no-progress", "--set", "droplet_after=1", "--set", "eps_greedy=0"]) == 0
    assert "16 records (16 new)" in capsys.readouterr().out
    rounds = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    assert [entry["strategy"]["settings"] for entry in rounds] == [{"droplet_after": 1, "eps_greedy": 0.0}] * 2
    assert rounds[0]["strategy"]["droplet"] == 0 < rounds[1]["strategy"]["droplet"]


@pytest.mark.slow
def test_the_verify_ablation_ranks_with_the_analyzer_alone(tmp_path, capsys):
    """``--cost-model analyzer`` (the verify ablation): Pruner's verifier is the static analyzer,
    which learns nothing from the measured batches, and the run tunes end to end."""
    from ms_pruner.cost_model import PSACostModel
    from ms_pruner.hardware import llvm_target
    from ms_pruner.tuning import search_components

    strategy, model = search_components("pruner", llvm_target(), seed=0, cost_model="analyzer")
    assert isinstance(model, PSACostModel) and strategy.first_round_config is not None
    work_dir = str(tmp_path / "wd")
    assert main(["tune", SPEC, "--target", "llvm", "--strategy", "pruner", "--cost-model", "analyzer", "--trials", "16",
                 "--per-iter", "8", "--work-dir", work_dir, "--seed", "0", "--no-progress"]) == 0
    assert "16 records (16 new)" in capsys.readouterr().out
    rounds = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    assert len(rounds) == 2 and all(entry["update_s"] < 0.5 for entry in rounds)


def test_droplet_moves_are_one_step(tensor_intrinsics):
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import (DesignSpace, decision_values, neighbour_decisions, neighbours, steps_apart,
                                  tile_decisions)

    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), get_gpu_spec("a100").target())
    (sch,) = space.sample(1, seed=2)
    trace = sch.trace.simplified(remove_postproc=True)
    moves = neighbour_decisions(trace)
    assert moves
    for inst, new in moves:
        old = trace.get_decision(inst)
        if inst.kind.name == "SamplePerfectTile":
            old = [int(x) for x in old]
            assert np.prod(new) == np.prod(old)
            assert sum(a != b for a, b in zip(old, new)) == 2
        else:
            assert abs(int(new) - int(old)) == 1
    found = neighbours(space, trace, limit=6, seed=0)
    assert 0 < len(found) <= 6
    assert all(steps_apart(decision_values(n.trace), decision_values(trace)) == 1 for n in found)
    assert steps_apart(decision_values(trace), decision_values(trace)) == 0
    tiles = tile_decisions(trace)
    assert len(tiles) == sum(1 for inst in trace.insts if inst.kind.name == "SamplePerfectTile") > 0
    for inst, new in moves:
        moved = tile_decisions(trace.with_decision(inst, new, remove_postproc=True))
        assert (moved == tiles) == (inst.kind.name != "SamplePerfectTile")


def test_replay_on_threads_gives_what_replay_one_at_a_time_gives(tensor_intrinsics):
    """DesignSpace.replay_many (the climb, Droplet and the measured records replay on the tuning
    context's threads): the same schedules, in order, as replaying one by one, rejects included."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, neighbour_decisions

    target = get_gpu_spec("h100").target()
    mod = parse_workload("matmul:512x512x512:float16:float32").prim_func()
    threaded = DesignSpace(mod, target, context=ms.TuneContext(mod=mod, target=target,
                                                               space_generator="post-order-apply", num_threads=2))
    (sch,) = threaded.sample(1, seed=2)
    base = sch.trace.simplified(remove_postproc=True)
    traces = [base.with_decision(inst, decision, remove_postproc=True) for inst, decision in neighbour_decisions(base)]
    seeds = list(range(1, len(traces) + 1))

    def keys(schedules):
        return [None if s is None else int(tvm_ffi.structural_hash(s.mod)) for s in schedules]

    one_by_one = keys(threaded.replay(t, seed) for t, seed in zip(traces, seeds))
    assert keys(threaded.replay_many(traces, seeds)) == one_by_one
    assert None in one_by_one and len(set(one_by_one) - {None}) > 4, "some moves valid, some rejected"


def test_categorical_mutator_moves_one_categorical_decision(tensor_intrinsics):
    """MutateCategorical changes exactly one SampleCategorical decision (fetch width or unroll), to
    another of its candidates, and results replay through the postprocessors."""
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.mutator import MutateCategorical

    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), get_gpu_spec("h100").target())
    (sch,) = space.sample(1, seed=2)
    trace = sch.trace.simplified(remove_postproc=True)

    def categorical(t, wanted=True):
        return [str(t.decisions[i]) for i in t.insts
                if i in t.decisions and (i.kind.name == "SampleCategorical") == wanted]

    mutator = MutateCategorical(seed=0)
    changed, replayed = set(), 0
    for _ in range(12):
        mutated = mutator.apply(trace)
        replayed += space.replay(mutated, seed=1) is not None  # the postprocessors may reject some
        diff = [k for k, (a, b) in enumerate(zip(categorical(trace), categorical(mutated))) if a != b]
        assert len(diff) == 1
        changed.add(diff[0])
        assert categorical(trace, wanted=False) == categorical(mutated, wanted=False)
    assert len(changed) > 1, "the mutator should reach more than one decision"
    assert replayed > 0


def test_unseen_mutator_skips_a_child_the_draft_has_met(tensor_intrinsics):
    """A trace and its post-processed replay share one key; a mutated child is returned the first
    time only, and a measured schedule's decisions are skipped in every later draft too."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import _ffi_api

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.mutator import SeenDecisions, UnseenMutator

    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), get_gpu_spec("h100").target())
    (sch,) = space.sample(1, seed=2)
    seen = SeenDecisions()
    assert any(inst.kind.name == "EnterPostproc" for inst in sch.trace.insts)
    assert seen.key(sch.trace) == seen.key(sch.trace.simplified(remove_postproc=True))
    tile = ms.mutator.MutateTileSize()
    tile._initialize_with_tune_context(space.context)
    mutator = UnseenMutator(tile, seen)
    children = [_ffi_api.MutatorApply(mutator, sch.trace, state) for state in range(1, 40)]
    new = [c for c in children if c is not None]
    assert len({seen.key(c) for c in new}) == len(new) >= 2 and seen.new == len(new)
    assert seen.repeated == len(children) - len(new) > 0, "39 tile moves of one trace should repeat one"
    child = new[0]
    again = _ffi_api.MutatorApply(tile, sch.trace, children.index(child) + 1)
    assert seen.key(again) == seen.key(child) and seen.key(child) != seen.key(sch.trace)
    seen.note_measured(child)
    seen.start_draft()
    assert _ffi_api.MutatorApply(mutator, sch.trace, children.index(child) + 1) is None
    assert _ffi_api.MutatorApply(mutator, sch.trace, children.index(new[1]) + 1) is not None


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
    records, hashes = _distinct_schedules(str(tmp_path), workload)
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
    records, hashes = _distinct_schedules(str(tmp_path), workload)
    assert len(records) == 16 and len(set(hashes)) == 16


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


def test_selection_power_sharpens_the_draft_parent_weights_but_keeps_the_order(tensor_intrinsics):
    """The analyzer's scores weight MetaSchedule's parent draw; a power above 1 favours the fastest."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, PSACostModel
    from ms_pruner.database.records import measure_candidate

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    candidates = [measure_candidate(s) for s in space.sample(8, seed=3)]
    analyzer = StaticAnalyzer.for_target(target)
    plain = PSACostModel(analyzer).predict(space.context, candidates)
    sharp = PSACostModel(analyzer, power=4.0).predict(space.context, candidates)
    assert len(set(plain.round(12))) > 1, "the sample should hold schedules the analyzer tells apart"
    assert list(np.argsort(-plain, kind="stable")) == list(np.argsort(-sharp, kind="stable"))
    assert sharp.max() / sharp.sum() > plain.max() / plain.sum()
    slowest_valid = plain[plain > 0].min()
    np.testing.assert_allclose(sharp[plain > 0].min() / sharp.max(), (slowest_valid / plain.max()) ** 4)


def test_draft_fitness_estimates_each_program_once(tensor_intrinsics):
    """Evolution scores its population every generation; a program seen before (here: the same traces
    replayed into new schedules, and a second model sharing the memory) is not estimated again."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace, PSACostModel
    from ms_pruner.database.records import measure_candidate

    target = get_gpu_spec("h100").target()
    space = DesignSpace(parse_workload("matmul:512x512x512:float16:float32").prim_func(), target)
    sampled = space.sample(6, seed=5)
    analyzer = StaticAnalyzer.for_target(target)
    plain = PSACostModel(analyzer)
    first = plain.predict(space.context, [measure_candidate(s) for s in sampled])
    assert plain.estimated == 6
    replayed = [space.replay(s.trace, seed=1) for s in sampled]
    again = plain.predict(space.context, [measure_candidate(s) for s in replayed])
    assert plain.estimated == 6 and plain.calls == 12
    np.testing.assert_array_equal(first, again)
    expected = [analyzer.estimate(s.mod).score for s in sampled]
    np.testing.assert_allclose(first, expected)
    sharp = PSACostModel(analyzer, power=2.0, scores=plain.scores)
    np.testing.assert_allclose(sharp.predict(space.context, [measure_candidate(s) for s in sampled]), first ** 2)
    assert sharp.estimated == 0


@pytest.mark.slow
def test_train_then_moa_tuning_through_the_cli(tmp_path, capsys):
    """`ms-pruner train` on a measured work dir, then `tune --strategy moa --pretrained` from it."""
    source = str(tmp_path / "source")
    assert main(["tune", "matmul:32x32x32:float32:float32", "--target", "llvm", "--trials", "16", "--per-iter", "16",
                 "--work-dir", source, "--seed", "0", "--no-progress"]) == 0
    model = str(tmp_path / "pacm.pt")
    assert main(["train", "--db", source, "--out", model, "--epochs", "5", "--time-budget", "20"]) == 0
    assert "trained on 16 records" in capsys.readouterr().out
    work_dir = str(tmp_path / "moa")
    assert main(["tune", SPEC, "--target", "llvm", "--strategy", "moa", "--pretrained", model, "--trials", "16",
                 "--per-iter", "8", "--work-dir", work_dir, "--seed", "0", "--no-progress"]) == 0
    assert "16 records (16 new)" in capsys.readouterr().out


@pytest.mark.slow
def test_pruner_search_carries_its_own_moa_model(tmp_path):
    """PrunerSearch(pretrained=...) verifies with, and updates, its own momentum-adapted PaCM."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import make_builder, make_runner
    from ms_pruner.cost_model import PaCMCore
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import PrunerSearch
    from ms_pruner.tuning.driver import metaschedule_logging_guard

    path = str(tmp_path / "fresh.pt")
    PaCMCore(seed=0, residual="transformer").save(path)

    def tune(trials):
        timings = []
        with metaschedule_logging_guard():
            ms.tune_tir(mod=parse_workload("matmul:32x32x32:float32:float32").prim_func(), target=llvm_target(),
                        work_dir=str(tmp_path / "wd"), max_trials_global=trials, num_trials_per_iter=4,
                        builder=make_builder("pruner", max_workers=2), runner=make_runner(), cost_model="random",
                        strategy=PrunerSearch(PrunerConfig(population=32, draft_size=16), pretrained=path,
                                              timings=timings))
        return timings

    timings = tune(8)
    assert [t["verifier"] for t in timings] == ["own MoA PaCM"] * 2
    assert [t["verifier_records"] for t in timings] == [4, 8]
    # Resumed in the same work dir: the fresh MoA model first learns the 8 records already measured.
    assert [t["verifier_records"] for t in tune(4)] == [12]


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
