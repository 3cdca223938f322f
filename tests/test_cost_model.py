"""PaCM: training, persistence, errors, MetaSchedule integration, and the held-out comparison."""

import math
import os

import numpy as np
import pytest
import torch

from conftest import H100_MM4096, REPO_ROOT, needs_h100_data
from ms_pruner.cli import main
from ms_pruner.cost_model import PaCM, PaCMCore, fit, ranking_loss, read_model_file
from ms_pruner.errors import UserError


@pytest.fixture(scope="module")
def real_samples(tensor_intrinsics):
    import os

    if not os.path.isdir(H100_MM4096):
        pytest.skip("../shared/data not present")
    from ms_pruner.database import replay_record
    from ms_pruner.cost_model.pacm import _task_key
    from ms_pruner.database.records import mean_latency, records_in_file_order

    core = PaCMCore(seed=0)
    samples = []
    for record in records_in_file_order(H100_MM4096)[:64]:
        sample = core.featurize([replay_record(record)], record.target)[0]
        sample.latency_s, sample.task = mean_latency(record), _task_key(record.workload.mod)
        samples.append(sample)
    return samples


@pytest.mark.slow
def test_training_reduces_the_ranking_loss(real_samples):
    core = PaCMCore(seed=0, residual="transformer")
    before = ranking_loss(core.net, real_samples, core.device)
    report = fit(core.net, real_samples, core.device, time_budget_s=60, max_epochs=20, val_frac=0.0)
    after = ranking_loss(core.net, real_samples, core.device)
    assert report.epochs == 20
    assert after < 0.8 * before


@pytest.mark.parametrize("residual", ["trees", "transformer"])
def test_untrained_model_ranks_like_the_analyzer(real_samples, residual):
    core = PaCMCore(seed=0, residual=residual)
    scores = core.scores(real_samples)
    priors = np.array([s.prior for s in real_samples])
    np.testing.assert_allclose(scores, priors, rtol=1e-5, atol=1e-5)


def decision_bound_samples(real_samples):
    """The real samples as a narrowed search sees them: one analyzer estimate for all (a tie the
    analyzer cannot break), latencies set by one sampled decision (the unroll step's column of the
    knobs): what the trees must learn."""
    import dataclasses

    from ms_pruner.cost_model import knobs

    column = (knobs.SPATIAL_SPLITS * knobs.SPATIAL_SLOTS + knobs.REDUCTION_SPLITS * knobs.REDUCTION_SLOTS
              + 3)  # the fourth SampleCategorical: the unroll step of these traces
    values = np.array([s.knobs[column] for s in real_samples])
    assert len(set(values)) >= 4
    return [dataclasses.replace(s, prior=9.0, latency_s=1e-4 * (1.0 + 0.05 * v)) for s, v in zip(real_samples, values)]


def test_trees_learn_a_decision_the_analyzer_misses(real_samples):
    from ms_pruner.analysis.metrics import spearman

    samples = decision_bound_samples(real_samples)
    train, test = samples[:48], samples[48:]
    core = PaCMCore(seed=0)
    core.add(train)
    core.train()
    assert core.trees.chosen is not None, core.trees.validation
    latency = np.array([s.latency_s for s in test])
    learned = spearman(-core.scores(test), latency)
    analyzer = spearman(-np.array([s.prior for s in test]), latency)
    assert analyzer == 0.0 and learned >= 0.8


def test_the_gate_keeps_the_analyzer_when_latency_follows_it(real_samples):
    import dataclasses

    samples = [dataclasses.replace(s, latency_s=float(np.exp(-s.prior))) for s in real_samples]
    core = PaCMCore(seed=0)
    core.add(samples)
    core.train()
    assert core.trees.chosen is None and core.trees.validation["analyzer"] > 2.0
    np.testing.assert_allclose(core.scores(samples), [s.prior for s in samples])


@pytest.mark.parametrize("momentum,residual", [(None, "trees"), (None, "transformer"), (0.9, "transformer")])
def test_save_load_round_trip(real_samples, tmp_path, momentum, residual):
    core = PaCMCore(momentum=momentum, seed=1, max_epochs=5, residual=residual)
    core.add(decision_bound_samples(real_samples))
    core.train()
    assert residual != "trees" or core.trees.chosen is not None
    path = str(tmp_path / "model.pt")
    core.save(path)
    loaded = PaCMCore(momentum=momentum, seed=7, residual=residual)
    loaded.load(path)
    assert loaded.residual == residual
    samples = decision_bound_samples(real_samples)
    np.testing.assert_array_equal(core.scores(samples), loaded.scores(samples))
    assert not np.allclose(core.scores(samples), [s.prior for s in samples])


def test_moa_refuses_a_trees_model(real_samples, tmp_path):
    core = PaCMCore(seed=1)
    core.add(decision_bound_samples(real_samples))
    core.train()
    path = str(tmp_path / "trees.pt")
    core.save(path)
    with pytest.raises(UserError, match="holds a trees PaCM"):
        PaCMCore(momentum=0.9).load(path, as_pretrained=True)
    with pytest.raises(UserError, match="unknown PaCM residual"):
        PaCMCore(residual="forest")


def test_moa_keeps_a_momentum_copy(real_samples, tmp_path):
    pretrained = PaCMCore(seed=2, max_epochs=5, residual="transformer")
    pretrained.add(real_samples[:32])
    pretrained.train()
    path = str(tmp_path / "pre.pt")
    pretrained.save(path)
    moa = PaCMCore(momentum=0.9, seed=3, max_epochs=5)
    moa.load(path, as_pretrained=True)
    start = {k: v.clone() for k, v in moa.ema.state_dict().items()}
    moa.add(real_samples[32:])
    moa.train()
    online, ema = dict(moa.net.named_parameters()), dict(moa.ema.named_parameters())
    name = "embed.0.weight"
    expected = 0.9 * start[name] + 0.1 * online[name].detach()
    assert torch.allclose(ema[name].detach(), expected, atol=1e-6)
    assert moa.predictor is moa.ema


@pytest.fixture(scope="module")
def backwards_model(real_samples, tmp_path_factory):
    """A transformer PaCM file trained to rank ``real_samples`` backwards: slowest first."""
    import dataclasses

    core = PaCMCore(seed=4, residual="transformer")
    backwards = [dataclasses.replace(s, latency_s=1e-8 / s.latency_s) for s in real_samples]
    fit(core.net, backwards, core.device, time_budget_s=60, max_epochs=40, batch_size=16, lr=3e-3, val_frac=0.0)
    path = str(tmp_path_factory.mktemp("moa") / "backwards.pt")
    core.save(path)
    return path


@pytest.mark.parametrize("gated", [True, False])
def test_moa_gives_way_to_the_analyzer_when_it_ranks_new_records_worse(real_samples, backwards_model, tmp_path,
                                                                          monkeypatch, gated):
    from ms_pruner.cost_model.pacm import MOA_GATE_ENV

    monkeypatch.setenv(MOA_GATE_ENV, "1" if gated else "0")
    moa = PaCMCore(momentum=0.9, seed=5, max_epochs=5)
    moa.load(backwards_model, as_pretrained=True)
    priors = [s.prior for s in real_samples]
    assert not np.allclose(moa.scores(real_samples), priors)  # no records yet: the momentum net predicts
    moa.add(real_samples)
    moa.train()
    assert moa.momentum_margin < -0.5  # judged before the fine-tune, on records it never trained on
    assert np.allclose(moa.scores(real_samples), priors) == gated == moa.gated_to_analyzer
    moa.save(str(tmp_path / "adapted.pt"))
    loaded = PaCMCore(momentum=0.9, seed=6)
    loaded.load(str(tmp_path / "adapted.pt"))
    np.testing.assert_array_equal(loaded.scores(real_samples), moa.scores(real_samples))


def test_bad_model_files_are_one_clear_line(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a model at all")
    with pytest.raises(UserError, match="corrupt PaCM model file"):
        read_model_file(str(garbage))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, str(foreign))
    with pytest.raises(UserError, match="is not a PaCM model file"):
        read_model_file(str(foreign))
    with pytest.raises(UserError, match="does not exist"):
        read_model_file(str(tmp_path / "missing.pt"))


def test_cli_rejects_a_corrupt_pretrained_model(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage")
    assert main(["tune", "--target", "llvm", "--strategy", "moa", "--pretrained", str(bad),
                 "--work-dir", str(tmp_path / "wd")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ms-pruner: error: corrupt PaCM model file") and "\n" not in err
    assert not (tmp_path / "wd").exists()


@pytest.mark.slow
def test_pacm_plugs_into_tune_tir_on_llvm(tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import make_builder, make_runner
    from ms_pruner.hardware import llvm_target
    from ms_pruner.tuning.driver import metaschedule_logging_guard
    from ms_pruner.workloads import parse_workload

    model = PaCM(seed=0, time_budget_s=2.0)
    with metaschedule_logging_guard():  # pytest's log handlers crash tune_tir's logging setup
        ms.tune_tir(
            mod=parse_workload("matmul:64x64x64:float32:float32").prim_func(),
            target=llvm_target(),
            work_dir=str(tmp_path),
            max_trials_global=16,
            num_trials_per_iter=8,
            builder=make_builder("pruner", max_workers=2),
            runner=make_runner(),
            cost_model=model,
        )
    assert model.update_calls == 2
    assert len(model.core.samples) == 16
    assert all(math.isfinite(s.latency_s) and s.latency_s > 0 for s in model.core.samples)
    assert len({s.task for s in model.core.samples}) == 1


@pytest.fixture(scope="module")
def committed_runs(tmp_path_factory, tensor_intrinsics):
    """Every run committed under docs/results (each GPU folder's work.tgz) and the shared database."""
    import os

    from ms_pruner.shared_data import unpack_committed_runs

    runs = unpack_committed_runs(str(tmp_path_factory.mktemp("committed")))
    assert len(runs) >= 6
    return runs + ([H100_MM4096] if os.path.isdir(H100_MM4096) else [])


# Where PaCM does not yet meet the goal (docs/cost_model.md): on the stock conv2d run the later half is
# mostly one tile geometry that the first half measured 5 times, and XGB's features find its fastest
# tenth more often (recall 0.62 vs 0.23). On the H200 runs (2026-11-27, `all` space): the Pruner run's
# trees pass the gate on NDCG and recall (0.984, 0.718 against the analyzer's 0.926, 0.324) and rank
# below the analyzer by Spearman (0.506 against 0.562); on the stock run the analyzer is at Spearman
# 0.491, and since the analyzer's tensor rate is mma.sync's (85fc168) the trees pass the gate on some
# seeds there too: NDCG and recall rise (0.950, 0.611 against 0.944, 0.500), Spearman falls to 0.487.
# Every other figure of every run is checked ("floor": Spearman >= 0.5).
SHORT_OF_GOAL = {("conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32/stock-20261124-111448", "xgb",
                  "recall_top10_in_top30"),
                 ("matmul_4096x4096x4096_float16_float32/pruner-20261127-235108", "analyzer", "spearman"),
                 ("matmul_4096x4096x4096_float16_float32/stock-20261127-235610", "analyzer", "spearman"),
                 ("matmul_4096x4096x4096_float16_float32/stock-20261127-235610", "floor", "spearman")}


@pytest.mark.slow
def test_pacm_ranks_every_committed_run_as_well_as_the_analyzer_and_xgb(committed_runs):
    """The verify model's goal: trained on a run's first half, PaCM ranks its later half at least as
    well as the analyzer alone and as MetaSchedule's XGB (Spearman, NDCG@10, recall; means over
    seeds 0-2, to the table's three decimals), and at Spearman >= 0.5."""
    from ms_pruner.evaluation.model_ranking import METRICS, evaluate_runs, run_name

    rows = evaluate_runs(committed_runs, ("analyzer", "pacm", "xgb"), (0, 1, 2))
    misses = {}
    for row in rows:
        name, mean = run_name(row["database"]), {m: {k: v["mean"] for k, v in row["summary"][m].items()}
                                                  for m in row["summary"]}
        if mean["pacm"]["spearman"] < 0.5:
            misses[(name, "floor", "spearman")] = (mean["pacm"]["spearman"], 0.5)
        for other in ("analyzer", "xgb"):
            for metric in METRICS:
                if round(mean["pacm"][metric], 3) < round(mean[other][metric], 3):
                    misses[(name, other, metric)] = (mean["pacm"][metric], mean[other][metric])
    assert {key: value for key, value in misses.items() if key not in SHORT_OF_GOAL} == {}
    assert SHORT_OF_GOAL <= set(misses), "a recorded shortfall is met now: take it out of SHORT_OF_GOAL"


@pytest.mark.slow
def test_pacm_finds_the_fastest_later_record_at_most_round_boundaries(committed_runs):
    """The replay check: at each round boundary of each Pruner run, PaCM trained on the rounds before
    ranks the fastest later record no worse than the better of the analyzer and XGB, at most
    boundaries."""
    from ms_pruner.evaluation.model_ranking import by_round

    rows = [row for path in committed_runs if "/pruner-" in path for row in by_round(path, ("analyzer", "pacm", "xgb"))]
    assert len(rows) >= 9
    no_worse = [row["pacm"] <= min(row["analyzer"], row["xgb"]) for row in rows]
    assert sum(no_worse) > len(rows) / 2, rows


@pytest.mark.slow
def test_evaluate_model_prints_one_table_for_several_runs(committed_runs, capsys):
    pruner_runs = [path for path in committed_runs if "/pruner-" in path][:2]
    args = ["evaluate-model", "--models", "analyzer,pacm", "--seeds", "0,1"]
    for path in pruner_runs:
        args += ["--db", path]
    assert main(args) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + 2 * len(pruner_runs)
    assert all(" analyzer " in line for line in table[2::2]) and all(" pacm " in line for line in table[3::2])


def test_xgb_scores_a_run_from_features_extracted_once_as_stock_xgb_does():
    """evaluate-model's XGB reads each candidate's features once a run, and scores what a fresh stock
    XGBModel, extracting its own, scores."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    from ms_pruner.database.records import measured_batch
    from ms_pruner.evaluation.model_ranking import EVALUATORS, load_run

    run = load_run(os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32"))
    train, test = list(range(32)), list(range(32, 64))
    context = ms.TuneContext(mod=run.records[0].workload.mod, target=run.records[0].target, num_threads=1)
    extracted = []
    for seed in (0, 1):
        scores, _, _, extra = EVALUATORS["xgb-trained"](run, train, test, seed)
        extracted.append(run.xgb_inputs[2].seconds)
        np.random.seed(seed)
        stock = ms.cost_model.XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=0)
        candidates, results = measured_batch(run.schedules, run.latency)
        stock.update(context, candidates[:32], results[:32])
        assert np.array_equal(scores, np.asarray(stock.predict(context, candidates[32:]), dtype=np.float64))
        assert extra["featurize_us"] > 0
    assert len(run.xgb_inputs[2].features) == 64 and extracted[1] == extracted[0]


def test_evaluate_model_refuses_bad_choices_in_one_line(capsys, tmp_path):
    assert main(["evaluate-model", "--db", str(tmp_path), "--models", "analyzer,forest"]) == 2
    assert capsys.readouterr().err.strip() == ("ms-pruner: error: unknown model(s) forest; choose from analyzer, "
                                               "pacm, pacm-transformer, pretrained, xgb, xgb-trained")
    assert main(["evaluate-model", "--db", str(tmp_path), "--models", "pretrained"]) == 2
    assert "go together" in capsys.readouterr().err
    cpu_run = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "batch_matmul_4x64x64x64_float32_float32")
    assert main(["evaluate-model", "--db", cpu_run, "--db", str(tmp_path / "none"), "--models", "analyzer"]) == 2
    err = capsys.readouterr().err.strip()  # the missing run, before a run is scored
    assert len(err.splitlines()) == 1 and "no MetaSchedule database" in err


@needs_h100_data
@pytest.mark.slow
def test_by_round_needs_a_round_log(capsys, tensor_intrinsics):
    assert main(["evaluate-model", "--by-round", "--db", H100_MM4096]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no round log" in err and "\n" not in err


def test_round_boundaries_skip_a_log_line_cut_short_by_a_kill(tmp_path):
    from ms_pruner.evaluation.model_ranking import round_boundaries

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ms_pruner_rounds.jsonl").write_text('{"trials": 32}\n{"trials": 16}\n{"trials": 16}\n{"tri')
    assert round_boundaries(str(tmp_path)) == [32, 48]


def test_pretrained_trees_are_a_warm_start_the_gate_weighs(real_samples, tmp_path):
    import dataclasses

    from ms_pruner.cost_model.pacm import pretrained_momentum

    samples = decision_bound_samples(real_samples)
    source = PaCMCore(seed=0)
    source.add(samples)
    source.train(offline=True)
    path = str(tmp_path / "trees.pt")
    source.save(path)
    assert pretrained_momentum(path) is None
    warm = PaCMCore(seed=0)
    warm.load(path, as_pretrained=True)
    np.testing.assert_allclose(warm.scores(samples), [s.prior for s in samples])
    warm.add([dataclasses.replace(s, task="new") for s in samples[:40]])
    warm.train()
    assert {"pretrained", "pretrained, adapted"} <= set(warm.trees.validation)
    assert warm.trees.chosen_name != "analyzer"


@pytest.mark.slow
def test_pacm_first_update_imports_nothing_once_its_dependencies_are_loaded():
    """A tuning call imports what its cost model imports on its first update before the round clock
    starts (import_model_dependencies): in a fresh process, PaCM's first update (trees or transformer)
    then imports none of torch's compiler hooks (sympy among them), scipy or xgboost, which round 0
    used to count; at most the profiler's small CUPTI monitor is left."""
    import ast
    import subprocess
    import sys

    script = """
import sys
import numpy as np
from ms_pruner.cost_model import PaCM, PaCMCore
from ms_pruner.cost_model.training import Sample
from ms_pruner.tuning.driver import import_model_dependencies
cores = [PaCMCore(max_epochs=2, residual="transformer"), PaCMCore()]
assert "torch._dynamo" not in sys.modules, "PaCM's construction imported torch._dynamo already"
assert "xgboost" not in sys.modules, "PaCM's construction imported xgboost already"
import_model_dependencies(PaCM())
before = set(sys.modules)
rng = np.random.default_rng(0)
for core in cores:
    core.add([Sample(tokens=rng.random((3, core.net.config["token_dim"])).astype("float32"), prior=1.0,
                     knobs=rng.random(8).astype("float32"), latency_s=1e-3 * (1 + i), task="t") for i in range(40)])
    core.train()
assert cores[1].trees.validation, "the trees were not fit"
print(sorted(set(sys.modules) - before))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert [m for m in imported if m.split(".")[0] in ("scipy", "sympy", "xgboost") or m.startswith(("torch._dynamo",
                                                                                           "torch._inductor"))] == []
    assert len(imported) <= 2, imported


def test_a_resumed_call_warms_its_model_alike_on_any_number_of_threads(h100_runs, tensor_intrinsics):
    """warmed_cost_model replays the earlier records on the tuning threads (tuning/resume.py): the
    model learns the same records in the same order, so it ranks alike whatever the thread count."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.database.records import replay_record
    from ms_pruner.database.records import measured_batch, open_database, records_for
    from ms_pruner.tuning.resume import warmed_cost_model

    database = open_database(h100_runs("matmul_4096x4096x4096_float16_float32", "pruner"))
    first = database.get_all_tuning_records()[0]
    mod, target = first.workload.mod, first.target
    measured = records_for(database, mod, target)
    records, later = measured[:24], measured[24:48]
    schedules = [replay_record(r) for r in later]
    candidates, _ = measured_batch(schedules, [1.0] * len(schedules))
    context = ms.TuneContext(mod=mod, target=target, task_name="main", num_threads=1)
    scores = []
    for threads in (1, 3):
        model, learned = warmed_cost_model(PaCM(seed=0), mod, target, records, num_threads=threads)
        assert learned == len(records) == 24
        scores.append(np.asarray(model.predict(context, candidates)))
    assert np.allclose(scores[0], scores[1])
    assert np.ptp(scores[0]) > 0, "a model that learned the records tells them apart"


def test_train_refuses_a_database_without_measured_records(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "database_workload.json").write_text("")
    (empty / "database_tuning_record.json").write_text("")
    out = tmp_path / "model.pt"
    assert main(["train", "--db", str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ms-pruner: error: {empty}: 0 records, fewer than 2 measured; nothing to train on"
    assert not out.exists()


@pytest.mark.slow
@needs_h100_data
def test_train_writes_trees_that_start_pacm_as_a_warm_start(tmp_path, capsys, tensor_intrinsics):
    from ms_pruner.cost_model.pacm import pretrained_momentum

    out = str(tmp_path / "trees.pt")
    assert main(["train", "--db", H100_MM4096, "--out", out, "--residual", "trees"]) == 0
    assert "(200 rounds)" in capsys.readouterr().out
    assert read_model_file(out)["residual"] == "trees" and pretrained_momentum(out) is None
    core = PaCMCore()
    core.load(out, as_pretrained=True)
    assert core.trees.pretrained is not None and core.trees.model is None
