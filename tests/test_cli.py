"""End-to-end CLI: real LocalBuilder/LocalRunner tuning on llvm, errors, repair, comparisons; stopping
and going on (Ctrl-C, time limits, restore): test_resume.py."""

import json
import os
import subprocess
import sys

import pytest

from conftest import KERNEL_FILE, REPO_ROOT, needs_gpu, record_lines
from ms_pruner.cli import main
from ms_pruner.hardware import cuda_device_name
from ms_pruner.tuning import mean_latency, open_database

SPEC = "matmul:128x128x128:float32:float32"


@pytest.mark.slow
def test_tune_then_rerun_keeps_records(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "16", "--work-dir", work_dir,
                 "--seed", "0", "--no-progress"]) == 0
    first = record_lines(work_dir)
    assert len(first) == 16
    out = capsys.readouterr().out
    assert "best" in out and "16 records (16 new)" in out
    rounds = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    assert sum(r["trials"] for r in rounds) == 16 and all(r["build_errors"] == 0 for r in rounds)

    # Same budget: nothing more to measure. Bigger budget: resumes, the first 16 stay.
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "16", "--work-dir", work_dir, "--no-progress"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "20", "--work-dir", work_dir, "--no-progress"]) == 0
    second = record_lines(work_dir)
    assert second[:16] == first and len(second) == 20
    rounds = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    assert rounds[-1]["total_trials"] == 20 and rounds[-1]["session"] == 1 and rounds[-1]["round"] == len(rounds) - 1
    records = open_database(work_dir).get_all_tuning_records()
    assert all(float(r.run_secs[0]) < 1.0 for r in records)

    assert main(["show", "--db", work_dir]) == 0
    shown = capsys.readouterr().out
    assert "20 records (20 valid)" in shown and "TFLOP/s" in shown and "tiles" in shown

    # Another workload tuned into the same work dir logs its own rounds; resuming the first one
    # continues the first one's rounds only.
    assert main(["tune", "matmul:64x64x64:float32:float32", "--target", "llvm", "--trials", "8",
                 "--work-dir", work_dir, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "24", "--work-dir", work_dir, "--no-progress",
                 "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert [(r["total_trials"], r["session"]) for r in resumed["rounds"]] == [(16, 0), (20, 1), (24, 2)]
    assert len({r["workload"] for r in resumed["rounds"]}) == 1

    # The best records, built and run again here, measure about what they were recorded at.
    assert main(["remeasure", "--work-dir", work_dir, "--target", "llvm", "--top", "2", "--repeat", "3", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["work_dirs"][work_dir]
    recorded = [r["recorded_s"] for r in again["records"]]
    assert recorded == sorted(recorded)
    assert recorded[0] == min(mean_latency(r) for r in open_database(work_dir).get_all_tuning_records())
    assert again["summary"]["measured"] == 2 and 0.25 < again["summary"]["median_ratio"] < 4

    # From a comparison: its finished stock runs only, not one set aside to be made again.
    compared = tmp_path / "compare"
    compared.mkdir()
    (compared / "compare.json").write_text(json.dumps({"workloads": {SPEC: {
        "runs": {"stock": {"work_dir": work_dir}, "pruner": {"work_dir": str(tmp_path / "pruner")}},
        "superseded": {"stock": [{"work_dir": str(tmp_path / "old-stock")}]}}}}))
    assert main(["remeasure", "--compare", str(compared), "--target", "llvm", "--top", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["work_dirs"]
    assert list(again) == [work_dir] and again[work_dir]["summary"]["measured"] == 1
    assert main(["remeasure", "--compare", str(compared), "--strategy", "moa", "--target", "llvm"]) == 2
    assert "no finished moa run" in capsys.readouterr().err


@pytest.mark.slow
def test_a_target_given_as_a_json_dict_is_tuned_with_its_attributes(tmp_path):
    work_dir = str(tmp_path / "wd")
    target = '{"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 1}'
    assert main(["tune", SPEC, "--target", target, "--trials", "8", "--work-dir", work_dir, "--no-progress"]) == 0
    records = open_database(work_dir).get_all_tuning_records()
    assert len(records) == 8
    assert {(str(r.target.attrs["mcpu"]), int(r.target.attrs["num-cores"])) for r in records} == {("x86-64-v2", 1)}


@pytest.mark.slow
def test_a_users_tensorir_kernel_is_tuned_from_its_file_and_resumed(tmp_path, capsys):
    path, work_dir = tmp_path / "kernels.py", str(tmp_path / "wd")
    path.write_text(KERNEL_FILE)
    for trials in (8, 16):
        assert main(["tune", f"{path}:built", "--target", "llvm", "--trials", str(trials), "--work-dir", work_dir,
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "kernels:built on llvm: best" in out and "16 records (8 new)" in out and len(record_lines(work_dir)) == 16
    # Its best two against its unscheduled function, named as tune took it.
    assert main(["check", "--work-dir", work_dir, "--workload", f"{path}:built", "--target", "llvm", "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"ok   {path}:built {work_dir}: ") for line in lines), lines


@pytest.mark.slow
def test_a_users_tensorir_kernel_is_compared_and_its_runs_checked(tmp_path, capsys):
    """compare FILE.py:NAME runs stock and Pruner on the user's kernel; check --compare holds each
    run's best against the kernel's unscheduled function (there is no named reference for it)."""
    path, out = tmp_path / "kernels.py", str(tmp_path / "cmp")
    path.write_text(KERNEL_FILE)
    assert main(["compare", f"{path}:matmul", "--target", "llvm", "--trials", "8", "--per-iter", "8", "--out", out,
                 "--no-progress"]) == 0
    entry = json.load(open(os.path.join(out, "compare.json")))["workloads"]["kernels:matmul"]
    assert sorted(entry["runs"]) == ["pruner", "stock"] and entry["flops"] == 2 * 64 ** 3
    assert entry["file"] == f"{path}:matmul" and entry["reference"] is None
    assert all(entry["summary"][s]["final_best_s"] > 0 for s in ("stock", "pruner"))
    capsys.readouterr()
    assert main(["check", "--compare", out, "--target", "llvm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    unscheduled = "C(64x64:float32, 64x64:float32, 64x64:float32) on llvm"
    assert len(lines) == 2 and all(line.startswith(f"ok   {unscheduled}") for line in lines)


def test_a_work_dir_has_one_writer_at_a_time(tmp_path, capsys):
    """While another process writes a work dir, every command that would write it is one line naming
    that process, and the records stay as they were; the lock goes with the process, even killed."""
    import shutil

    source = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32")
    work_dir = str(tmp_path / "wd")
    shutil.copytree(source, work_dir)
    before = open(os.path.join(work_dir, "database_tuning_record.json"), "rb").read()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom ms_pruner.database import sole_writer\n"
         "with sole_writer(sys.argv[1], 'tune pruner'):\n    print('held', flush=True)\n    time.sleep(300)\n",
         work_dir], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for argv in (["tune", SPEC, "--target", "llvm", "--trials", "64", "--work-dir", work_dir],
                     ["compare", SPEC, "--target", "llvm", "--trials", "8", "--out", work_dir],
                     ["tune-model", "--model", "mlp-tiny", "--target", "llvm", "--work-dir", work_dir],
                     ["db", "merge", source, "--out", work_dir], ["db", "repair", work_dir]):
            assert main(argv + ["--no-progress"] * (argv[0] != "db")) == 2, argv
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1, err
            assert f"work dir {work_dir} is being written by another process (tune pruner, pid {holder.pid} on " in err
        assert open(os.path.join(work_dir, "database_tuning_record.json"), "rb").read() == before
    finally:
        holder.kill()
        holder.wait()
    assert main(["db", "repair", work_dir]) == 0
    assert "every line reads" in capsys.readouterr().out


@pytest.mark.skipif(cuda_device_name() is not None, reason="this machine has a GPU")
def test_cuda_target_without_gpu_is_one_clear_line(tmp_path):
    work_dir = tmp_path / "wd"
    proc = subprocess.run(
        [sys.executable, "-m", "ms_pruner", "tune", "matmul:4096x4096x4096:float16:float32", "--target", "cuda",
         "--gpu", "h100", "--work-dir", str(work_dir)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "--rpc HOST:PORT:KEY" in lines[0]
    assert not work_dir.exists()


def test_bad_input_is_one_line(capsys, tmp_path):
    assert main(["tune", "matmul:8x8", "--target", "llvm"]) == 2
    assert "expected MxNxK" in capsys.readouterr().err
    assert main(["show", "--work-dir", str(tmp_path)]) == 2
    assert "no MetaSchedule database" in capsys.readouterr().err
    (tmp_path / "database_workload.json").write_text("not json\n")
    (tmp_path / "database_tuning_record.json").write_text("")
    assert main(["show", "--work-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ms-pruner: error: corrupt MetaSchedule database") and "\n" not in err
    assert main(["remeasure", "--db", str(tmp_path / "none"), "--target", "llvm"]) == 2
    assert "no MetaSchedule database" in capsys.readouterr().err
    assert main(["remeasure", "--target", "llvm"]) == 2
    assert "remeasure needs --db WORK_DIR or --compare OUT_DIR" in capsys.readouterr().err
    tuned = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32")
    assert main(["remeasure", "--db", tuned, "--target", "llvm", "--repeat", "0"]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --repeat must be positive, got 0"
    for setting, message in (("eps_greedy=2", "Pruner setting eps_greedy is a share, from 0 to 1, got 2"),
                             ("population=1.5", "Pruner setting population takes ints, not '1.5'"),
                             ("widen_cold_fetches=maybe", "Pruner setting widen_cold_fetches takes 0 or 1, not 'maybe'"),
                             ("cold_selection_power=nan", "Pruner setting cold_selection_power must be finite and at least 0, got nan"),
                             ("eps_greedy", "--set takes NAME=VALUE")):
        assert main(["tune", SPEC, "--target", "llvm", "--work-dir", str(tmp_path / "w"), "--set", setting]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("ms-pruner: error: " + message) and "\n" not in err
    assert not (tmp_path / "w").exists()
    # A folder to write into that is a file, or lies under one.
    a_file, under_it = tmp_path / "a_file", tmp_path / "a_file" / "c"
    a_file.write_text("")
    for command, message in ((["tune", SPEC, "--work-dir", str(a_file)], f"database folder '{a_file}' is a file"),
                             (["compare", "--workload", SPEC, "--trials", "4", "--out", str(under_it)],
                              f"cannot make the comparison folder '{under_it}': Not a directory")):
        assert main(command + ["--target", "llvm"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("ms-pruner: error: " + message) and "\n" not in err, err


def _copy_tuned_run(tmp_path):
    import shutil

    work = tmp_path / "run"
    shutil.copytree(os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0", "matmul_128x128x128_float32_float32"),
                    work)
    return work


def test_a_record_line_cut_short_by_a_kill_is_named_and_repair_keeps_every_whole_record(tmp_path, capsys):
    work = _copy_tuned_run(tmp_path)
    records = work / "database_tuning_record.json"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    assert main(["show", "--work-dir", str(work)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ms-pruner: error: corrupt MetaSchedule database in '{work}': database_tuning_record.json line 64 of 64: "
        f"cut short or not JSON; 'ms-pruner db repair {work}' sets bad lines aside and keeps the rest")
    assert main(["db", "repair", str(work)]) == 0
    assert capsys.readouterr().out.strip() == (f"{work}: set 1 bad lines aside into {records}.bad; 63 records kept")
    assert records.read_text() == "".join(lines[:-1])
    assert (work / "database_tuning_record.json.bad").read_text() == lines[-1][:len(lines[-1]) // 2] + "\n"
    assert len(open_database(str(work)).get_all_tuning_records()) == 63
    assert main(["db", "repair", str(work)]) == 0
    assert capsys.readouterr().out.strip() == f"{work}: every line reads; 63 records, nothing changed"


def test_repair_sets_a_cut_last_workload_aside_and_refuses_to_renumber_workloads(tmp_path, capsys):
    work = _copy_tuned_run(tmp_path)
    workloads = work / "database_workload.json"
    whole = workloads.read_text()
    workloads.write_text(whole + whole[:40])
    records = work / "database_tuning_record.json"
    records.write_text(records.read_text() + '[1, ["cut off"]]\n')
    assert main(["db", "repair", str(work)]) == 0
    assert capsys.readouterr().out.strip() == (f"{work}: set 2 bad lines aside into {workloads}.bad, {records}.bad; "
                                               "64 records kept")
    assert workloads.read_text() == whole
    workloads.write_text("{not json\n" + whole)
    assert main(["db", "repair", str(work)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ms-pruner: error: '{work}': database_workload.json line 1 is bad and whole workloads follow it; "
        "setting it aside would renumber the workloads the records name")
    assert workloads.read_text() == "{not json\n" + whole


def test_a_write_that_fails_midway_leaves_the_file_as_it_was(tmp_path):
    """compare.json and tune-model summaries are replaced whole: a write cut off (here by a value
    JSON cannot hold, after the first keys) leaves the earlier file, and no staging file."""
    from ms_pruner.files import replace_json

    path = tmp_path / "compare.json"
    replace_json(str(path), {"runs": [1, 2]})
    with pytest.raises(TypeError):
        replace_json(str(path), {"runs": [1, 2, 3], "machine": object()})
    assert json.loads(path.read_text()) == {"runs": [1, 2]} and os.listdir(tmp_path) == ["compare.json"]


def test_a_round_size_below_one_is_refused_before_anything_is_written(capsys, tmp_path):
    """``--per-iter`` 0 or negative is one line, for tune and compare alike, and leaves no work dir
    or comparison behind (a comparison's settings, once written, bind the later calls into it)."""
    work_dir, out = tmp_path / "work", tmp_path / "out"
    assert main(["tune", SPEC, "--target", "llvm", "--trials", "4", "--per-iter", "-3",
                 "--work-dir", str(work_dir)]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --per-iter must be positive, got -3"
    assert main(["compare", "--workload", SPEC, "--target", "llvm", "--trials", "4", "--per-iter", "0",
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --per-iter must be positive, got 0"
    assert main(["compare", "--workload", SPEC, "--target", "llvm", "--trials", "4", "--strategies", "pruner,foo",
                 "--out", str(out)]) == 2
    assert "unknown strategy 'foo'" in capsys.readouterr().err
    assert main(["compare", SPEC, "matmul:8x8:float32", "--target", "llvm", "--out", str(out)]) == 2
    assert "bad matmul dims '8x8'" in capsys.readouterr().err  # a spec given as tune takes it is a workload
    assert main(["compare", "--target", "llvm", "--out", str(out)]) == 2
    assert "compare needs WORKLOAD" in capsys.readouterr().err
    for options, message in ((["--space", "all"], "--space all is a CUDA tensor-core space; target llvm has none"),
                             (["--set", "cold_climb_starts=2", "--no-first-round"], "a first-round setting")):
        assert main(["compare", "--workload", SPEC, "--target", "llvm", "--trials", "4", "--out", str(out),
                     *options]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["tune", SPEC, "--target", "llvm", "--seed", "-1", "--work-dir", str(work_dir)])
    assert exited.value.code == 2 and "argument --seed: must be from 0 to 4294967295, got -1" in capsys.readouterr().err
    assert not work_dir.exists() and not out.exists()


def test_compare_seeds_joins_the_committed_cpu_comparisons(capsys, monkeypatch):
    """``ms-pruner compare-seeds`` reads the three seeds' comparisons committed under docs/results/cpu
    into the table docs/results/cpu/compare_seeds.md holds (made from them by the script it replaces)."""
    monkeypatch.chdir(REPO_ROOT)  # the table names the directories as given
    results = os.path.join("docs", "results", "cpu")
    dirs = [os.path.join(results, name) for name in ("compare", "compare_seed1", "compare_seed2")]
    assert main(["compare-seeds", *dirs]) == 0
    with open(os.path.join(REPO_ROOT, results, "compare_seeds.md"), encoding="utf-8") as handle:
        assert capsys.readouterr().out == handle.read()
    assert main(["compare-seeds", str(REPO_ROOT)]) == 2
    assert "cannot read comparison" in capsys.readouterr().err


def test_restore_refuses_a_malformed_rerun_in_one_line(capsys, tmp_path):
    assert main(["restore", "--from", str(tmp_path), "--out", str(tmp_path / "out"), "--target", "llvm",
                 "--rerun", "pruner"]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --rerun takes SPEC=STRATEGY, not 'pruner'"
    assert not (tmp_path / "out").exists()


def test_the_python_api_refuses_a_bad_strategy_or_seed_before_making_the_work_dir(tmp_path):
    """``ms_pruner.tune_tir`` checks what it is asked for before it creates anything (an unknown
    strategy used to leave an empty database behind, a negative seed a traceback from inside TVM)."""
    from ms_pruner import tune_tir
    from ms_pruner.errors import UserError
    from ms_pruner.workloads import parse_workload

    mod = parse_workload(SPEC).prim_func()
    for kwargs, message in (({"strategy": "foo"}, "unknown strategy 'foo'"),
                            ({"seed": -1}, "--seed must be from 0 to 4294967295, got -1"),
                            ({"strategy": "moa"}, "--strategy moa needs --pretrained MODEL"),
                            ({"strategy": "stock", "first_round": False},
                             "--no-first-round switches off Pruner's first-round policy; --strategy stock has none"),
                            ({"strategy": "pruner", "cost_model": "trees"}, "unknown cost model 'trees'"),
                            ({"strategy": "moa", "pretrained": "m.pt", "cost_model": "analyzer"},
                             "--strategy moa verifies with its pretrained PaCM"),
                            ({"strategy": "stock", "pruner_settings": {"eps_greedy": 0}},
                             "--set changes PrunerSearch's settings; --strategy stock has none"),
                            ({"pruner_settings": {"populaton": 64}}, "unknown Pruner setting 'populaton'"),
                            ({"pruner_settings": {"cold_climb_starts": 0}, "first_round": False},
                             "--set cold_climb_starts: a first-round setting, and --no-first-round")):
        with pytest.raises(UserError, match=message):
            tune_tir(mod, "llvm", str(tmp_path / "work"), 4, **kwargs)
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_compare_merges_runs_made_one_strategy_at_a_time(tmp_path, capsys):
    out = str(tmp_path / "cmp")
    common = ["compare", "--workload", "matmul:64x64x64:float32:float32", "--target", "llvm", "--trials", "8",
              "--per-iter", "8", "--out", out, "--no-progress"]
    assert main(common + ["--strategies", "stock"]) == 0
    first = json.load(open(os.path.join(out, "compare.json")))
    runs = first["workloads"]["matmul:64x64x64:float32:float32"]["runs"]
    assert list(runs) == ["stock"] and runs["stock"]["curve"][-1]["trials"] == 8
    stock_dir = runs["stock"]["work_dir"]

    # A second call adds pruner and keeps the stock run as it was, without re-tuning it.
    assert main(common + ["--strategies", "stock,pruner"]) == 0
    merged = json.load(open(os.path.join(out, "compare.json")))
    entry = merged["workloads"]["matmul:64x64x64:float32:float32"]
    assert sorted(entry["runs"]) == ["pruner", "stock"]
    assert entry["runs"]["stock"] == runs["stock"] and len(os.listdir(os.path.dirname(stock_dir))) == 2
    assert entry["summary"]["pruner"]["trials"] == 8 and entry["summary"]["stock"]["final_best_s"] > 0
    assert len(merged["commands"]) == 2
    table = open(os.path.join(out, "compare.md")).read()
    assert "| `matmul:64x64x64:float32:float32` |" in table and "pruner round 0" in table
    capsys.readouterr()

    # Other settings cannot share the table: one clear line, nothing overwritten.
    assert main(common[:5] + ["--trials", "16", "--per-iter", "8", "--out", out, "--no-progress"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fresh" in err[0]
    assert main(common + ["--strategies", "stock,pruner", "--set", "eps_greedy=0"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'pruner_settings': {'eps_greedy': 0.0}" in err[0] and "--fresh" in err[0]
    assert json.load(open(os.path.join(out, "compare.json"))) == merged


def test_summary_says_when_stock_found_its_best_beside_the_speedup():
    """The speedup divides stock's whole wall time by Pruner's time to stock's best; the summary also
    says when each run first reached its own best, and compare.md shows it beside stock's wall."""
    from ms_pruner.tuning.compare import markdown_table, summarize

    def run(points):
        curve = [{"round": i, "wall_s": wall, "best_latency_s": best, "trials": 64 * (i + 1), "search_share": 0.4,
                  "search_s": 1.0, "update_s": 0.0, "build_s": 1.0, "run_s": 1.0, "strategy_split": {}, "call": 0}
                 for i, (wall, best) in enumerate(points)]
        return {"best_latency_s": min(best for _, best in points), "curve": curve}

    runs = {"stock": run([(100, 5e-4), (210, 4.5e-4), (330, 4.4e-4), (450, 4.4e-4)]),
            "pruner": run([(80, 4.6e-4), (150, 4.3e-4), (220, 4.2e-4)])}
    summary = summarize(runs)
    assert summary["stock"]["time_to_own_best_s"] == 330 and summary["stock"]["wall_s"] == 450
    assert summary["pruner"]["time_to_stock_best_s"] == 150 and summary["pruner"]["search_speedup"] == 3.0
    assert summary["pruner"]["time_to_own_best_s"] == 220
    report = {"target": "llvm", "trials": 256, "per_iter": 64, "seed": 0,
              "workloads": {SPEC: {"runs": runs, "summary": summary}}}
    assert f"| `{SPEC}` | 440.0 | 420.0 | 450, 330 | 150 | 3.00x |" in markdown_table(report)
    # A run that recorded which tensor-core instruction its best uses shows it beside its best.
    with_kind = {"stock": dict(runs["stock"], best_instruction="wmma"), "pruner": dict(runs["pruner"],
                                                                                        best_instruction="m16n8k16")}
    kinds = dict(report, workloads={SPEC: {"runs": with_kind, "summary": summarize(with_kind)}})
    assert f"| `{SPEC}` | 440.0 (wmma) | 420.0 (m16n8k16) | 450, 330 |" in markdown_table(kinds)

    # A Pruner run cut by a call's end: its finished rounds already say whether it reached stock's best.
    for points, said in (([(60, 4.5e-4), (110, 4.4e-4)], "it reached stock's final best at 110 s, 4.09x sooner"),
                         ([(60, 4.5e-4)], "not yet at stock's final best (440.0 us)")):
        cut = {"runs": {"stock": runs["stock"]}, "summary": summarize({"stock": runs["stock"]}),
               "pending": {"pruner": "work/cut"}, "partial": {"pruner": dict(run(points), work_dir="work/cut")}}
        text = markdown_table(dict(report, workloads={SPEC: cut}))
        last = len(points) - 1
        assert (f"`{SPEC}` pruner: unfinished, resumed by the next call from `work/cut`. So far {64 * len(points)} "
                f"trials in {points[-1][0]} s, best {points[-1][1] * 1e6:.1f} us (round {last}); {said}") in text

    # Runs set aside and made again (restore --rerun) are held against the stock run of their own comparison.
    again = {"stock": run([(60, 4.1e-4), (120, 4.0e-4)]), "pruner": run([(50, 3.9e-4)])}
    for superseded, said in (({"pruner": [runs["pruner"]]}, "it never reached stock's final best (400.0 us)"),
                             ({"stock": [runs["stock"]], "pruner": [runs["pruner"]]},
                              "it reached stock's final best at 150 s, 3.00x sooner")):
        entry = {"runs": again, "summary": summarize(again), "superseded": {
            name: [dict(r, work_dir=f"work/{name}-old") for r in superseded[name]] for name in superseded}}
        text = markdown_table(dict(report, workloads={SPEC: entry}))
        assert (f"`{SPEC}` pruner: an earlier run (`work/pruner-old`) was set aside and made again; it measured "
                f"192 trials in 220 s, best 420.0 us; {said}") in text


@needs_gpu
@pytest.mark.slow
@pytest.mark.parametrize("space", ["wmma", "mma"])
def test_a_gpu_tunes_each_rule_family_and_its_best_kernel_computes_the_product(tmp_path, capsys, space):
    """On a GPU: 16 trials of a 1024^3 fp16 matmul in one rule family measure valid kernels (the
    mma family's use more than the tag's 48 KB of dynamic shared memory, which TVM's CUDA runtime
    opts into), and the best one computes the product (``check``)."""
    spec = "matmul:1024x1024x1024:float16:float32"
    work_dir = str(tmp_path / space)
    assert main(["tune", spec, "--target", "cuda", "--trials", "16", "--per-iter", "16", "--space", space,
                 "--work-dir", work_dir, "--no-progress", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["best_latency_s"] and result["space"] == space
    assert result["best_instruction"] in ({"wmma"} if space == "wmma" else {"m16n8k8", "m16n8k16"})
    assert main(["check", "--work-dir", work_dir, "--workload", spec, "--target", "cuda"]) == 0
