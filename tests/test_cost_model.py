"""PaCM: training, persistence, errors, MetaSchedule integration, and the held-out comparison."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import H100_MM4096, needs_h100_data
from ms_pruner.cli import main
from ms_pruner.cost_model import PaCM, PaCMCore, fit, ranking_loss, read_model_file
from ms_pruner.errors import UserError


@pytest.fixture(scope="module")
def real_samples(tensor_intrinsics):
    import os

    if not os.path.isdir(H100_MM4096):
        pytest.skip("../shared/data not present")
    from ms_pruner.analysis import replay_record
    from ms_pruner.cost_model.pacm import _task_key
    from ms_pruner.tuning.records import mean_latency, records_in_file_order

    core = PaCMCore(seed=0)
    samples = []
    for record in records_in_file_order(H100_MM4096)[:64]:
        sample = core.featurize([replay_record(record).mod], record.target)[0]
        sample.latency_s, sample.task = mean_latency(record), _task_key(record.workload.mod)
        samples.append(sample)
    return samples


def test_training_reduces_the_ranking_loss(real_samples):
    core = PaCMCore(seed=0)
    before = ranking_loss(core.net, real_samples, core.device)
    report = fit(core.net, real_samples, core.device, time_budget_s=60, max_epochs=20, val_frac=0.0)
    after = ranking_loss(core.net, real_samples, core.device)
    assert report.epochs == 20
    assert after < 0.8 * before


def test_untrained_model_ranks_like_the_analyzer(real_samples):
    core = PaCMCore(seed=0)
    scores = core.scores(real_samples)
    priors = np.array([s.prior for s in real_samples])
    np.testing.assert_allclose(scores, priors, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("momentum", [None, 0.9])
def test_save_load_round_trip(real_samples, tmp_path, momentum):
    core = PaCMCore(momentum=momentum, seed=1, max_epochs=5)
    core.add(real_samples)
    core.train()
    path = str(tmp_path / "model.pt")
    core.save(path)
    loaded = PaCMCore(momentum=momentum, seed=7)
    loaded.load(path)
    np.testing.assert_array_equal(core.scores(real_samples), loaded.scores(real_samples))


def test_moa_keeps_a_momentum_copy(real_samples, tmp_path):
    pretrained = PaCMCore(seed=2, max_epochs=5)
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


@needs_h100_data
def test_pacm_beats_stock_xgb_on_later_records(capsys, tensor_intrinsics):
    rows = []
    for seed in (0, 1, 2):
        assert main(["evaluate-model", "--db", H100_MM4096, "--models", "pacm,xgb", "--train-frac", "0.5",
                     "--seed", str(seed), "--json"]) == 0
        rows.append(json.loads(capsys.readouterr().out))
    result = rows[0]
    assert len(result["test"]) == 95 and set(result["test"][0]) == {"measured_s", "pacm", "xgb"}
    mean = {m: {k: np.mean([r[m][k] for r in rows]) for k in ("spearman", "ndcg10")} for m in ("pacm", "xgb")}
    assert mean["pacm"]["spearman"] >= 0.5 and mean["pacm"]["ndcg10"] >= 0.8
    assert mean["pacm"]["spearman"] > mean["xgb"]["spearman"]
    assert mean["pacm"]["ndcg10"] > mean["xgb"]["ndcg10"]


def test_pacm_first_update_imports_nothing_once_its_dependencies_are_loaded():
    """A tuning call imports what its cost model imports on its first update before the round clock
    starts (import_model_dependencies): in a fresh process, PaCM's first update then imports none of
    torch's compiler hooks (sympy among them) or scipy, which round 0 used to count; at most the
    profiler's small CUPTI monitor is left."""
    import ast
    import subprocess
    import sys

    script = """
import sys
import numpy as np
from ms_pruner.cost_model import PaCM, PaCMCore
from ms_pruner.cost_model.training import Sample
from ms_pruner.tuning.driver import import_model_dependencies
core = PaCMCore(max_epochs=2)
assert "torch._dynamo" not in sys.modules, "PaCM's construction imported torch._dynamo already"
import_model_dependencies(PaCM())
before = set(sys.modules)
rng = np.random.default_rng(0)
core.add([Sample(tokens=rng.random((3, core.net.config["token_dim"])).astype("float32"), prior=1.0,
                 latency_s=1e-3 * (1 + i), task="t") for i in range(12)])
core.train()
print(sorted(set(sys.modules) - before))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert [m for m in imported if m.split(".")[0] in ("scipy", "sympy") or m.startswith(("torch._dynamo",
                                                                                           "torch._inductor"))] == []
    assert len(imported) <= 2, imported


def test_a_resumed_call_warms_its_model_alike_on_any_number_of_threads(h100_runs, tensor_intrinsics):
    """warmed_cost_model replays the earlier records on the tuning threads (tuning/resume.py): the
    model learns the same records in the same order, so it ranks alike whatever the thread count."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis.db_eval import replay_record
    from ms_pruner.tuning.records import measured_batch, open_database, records_for
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
