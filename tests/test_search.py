"""PrunerSearch end to end on llvm with the real builder and runner, and Droplet neighbours."""

import json
import os

import numpy as np
import pytest

from ms_pruner.cli import main
from ms_pruner.search import PrunerConfig
from ms_pruner.search.config import TARGET_DEFAULTS
from ms_pruner.workloads import parse_workload
from conftest import distinct_schedules

SPEC = "matmul:64x64x64:float32:float32"


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
    records, hashes = distinct_schedules(str(tmp_path), workload)
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
    records, hashes = distinct_schedules(work_dir, workload)
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
