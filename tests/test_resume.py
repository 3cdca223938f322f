"""Stopping and going on: Ctrl-C and time limits keep what was measured and stop at a round's end, a
rerun resumes, a comparison cut anywhere resumes its cut run, also restored on another machine."""

import json
import os
import subprocess
import sys

import pytest

from conftest import record_lines
from ms_pruner.cli import main

SPEC = "matmul:128x128x128:float32:float32"


@pytest.mark.slow
def test_interrupt_keeps_measured_records(tmp_path):
    """SIGINT mid-tuning (Ctrl-C, `timeout -s INT` at a call's limit): one line, exit 130, records kept."""
    import signal
    import time

    work_dir = tmp_path / "wd"
    records = work_dir / "database_tuning_record.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ms_pruner", "tune", SPEC, "--target", "llvm", "--trials", "256", "--per-iter", "8",
         "--work-dir", str(work_dir), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (records.exists() and records.stat().st_size):
        time.sleep(0.5)
    assert proc.poll() is None, proc.stderr.read()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "stopping after the current round" in err and "ms-pruner: interrupted; records measured" in err
    assert "Traceback" not in err and "Segfault" not in err, err[-2000:]
    kept = record_lines(str(work_dir))
    assert 8 <= len(kept) < 256 and len(kept) % 8 == 0
    assert all(json.loads(line)[1][1][0] < 1e9 for line in kept)  # no build killed by the interrupt


@pytest.mark.slow
def test_time_limit_stops_at_a_round_boundary_and_a_rerun_resumes(tmp_path, capsys):
    """`--time-limit` ends a call after the last whole round that leaves no time for another (exit 124,
    a closing line that says so): round 0 always runs, a resumed call with less time than its longest round measures
    nothing, and a call without the limit finishes the run with the earlier records first."""
    work_dir = str(tmp_path / "wd")
    log = os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl")
    args = ["tune", SPEC, "--target", "llvm", "--trials", "32", "--per-iter", "8", "--work-dir", work_dir,
            "--seed", "0", "--no-progress"]
    assert main(args + ["--time-limit", "0.5"]) == 124
    err = capsys.readouterr().err.strip().splitlines()
    assert "stopped by the time limit" in err[-1] and "rerun the command to resume" in err[-1]
    first = record_lines(work_dir)
    assert len(first) == 8 and len(open(log).readlines()) == 1

    assert main(args + ["--time-limit", "0.5"]) == 124
    assert "stopped by the time limit" in capsys.readouterr().err
    assert record_lines(work_dir) == first and len(open(log).readlines()) == 1

    assert main(args) == 0
    assert record_lines(work_dir)[:8] == first and len(record_lines(work_dir)) == 32
    assert main(args[:1] + ["--time-limit", "0"]) == 2
    assert "--time-limit must be positive" in capsys.readouterr().err


def test_time_limit_budgets_a_new_run_by_the_longest_round_of_the_process():
    """`compare` tunes its runs one after another in one process: a run that has measured nothing
    yet is budgeted at the longest round the earlier runs took, and none at all before any."""
    from ms_pruner.tuning.interrupt import (TimeLimitReached, graceful_interrupts, note_round, set_time_limit,
                                            stop_unless_time_for)

    set_time_limit(100.0)
    try:
        with graceful_interrupts():
            stop_unless_time_for()
            note_round(30.0)
            stop_unless_time_for()
            stop_unless_time_for(60.0)
        note_round(150.0)
        with pytest.raises(TimeLimitReached, match="another round takes about 150 s"):
            with graceful_interrupts():
                stop_unless_time_for()
    finally:
        set_time_limit(None)
    # A follow-up round (the rest of a cold batch) counts with the round before it.
    set_time_limit(80.0)
    try:
        note_round(50.0)
        note_round(40.0, continues_batch=True)
        note_round(60.0)
        with pytest.raises(TimeLimitReached, match="another round takes about 90 s"):
            with graceful_interrupts():
                stop_unless_time_for(0.0)
    finally:
        set_time_limit(None)
    # ... but a round that left the rest of its batch to a follow-up budgets that follow-up at its own
    # seconds scaled to the trials left, not at the longest batch, so a call does not end a cold round half measured.
    from ms_pruner.tuning.instrument import follow_up_seconds
    half = {"trials": 32, "search_s": 20.0, "build_s": 15.0, "run_s": 10.0, "update_s": 5.0,
            "strategy": {"follow_up_due": 32}}
    assert follow_up_seconds(half) == 50.0 and follow_up_seconds(dict(half, strategy={})) is None
    set_time_limit(80.0)
    try:
        note_round(120.0)
        note_round(50.0)
        with graceful_interrupts():
            stop_unless_time_for(follow_up_s=follow_up_seconds(half))
        with pytest.raises(TimeLimitReached, match="another round takes about 120 s"):
            with graceful_interrupts():
                stop_unless_time_for()
    finally:
        set_time_limit(None)
    from ms_pruner.tuning.instrument import batch_seconds

    log = [{"search_s": 40, "build_s": 10, "run_s": 20, "update_s": 5, "strategy": {}},
           {"search_s": 4, "build_s": 10, "run_s": 20, "update_s": 1, "strategy": {"follow_up": True}},
           {"search_s": 20, "build_s": 14, "run_s": 40, "update_s": 1}]
    assert batch_seconds(log) == [110.0, 75.0]
    with graceful_interrupts():
        stop_unless_time_for(1e9)  # no limit set


@pytest.mark.slow
def test_compare_cut_by_a_time_limit_resumes_the_cut_run(tmp_path):
    """`timeout -s INT` stops `compare` mid-run (a ten-minute call's limit): the next call resumes that run
    in its work dir rather than starting it again, continuing its rounds, trial count and clock, with the
    cost model first trained on the records measured so far."""
    import signal
    import time

    from ms_pruner.hardware import resolve_target
    from ms_pruner.tuning import tune_tir
    from ms_pruner.workloads import parse_workload

    out = tmp_path / "cmp"
    args = ["compare", "--workload", SPEC, "--target", "llvm", "--trials", "24", "--per-iter", "8",
            "--strategies", "stock", "--seed", "0", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "ms_pruner"] + args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report_path = out / "compare.json"
    work_dir = None
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if work_dir is None and report_path.exists():
            try:
                work_dir = json.loads(report_path.read_text())["workloads"][SPEC]["pending"]["stock"]
            except (ValueError, KeyError):
                pass
        records = os.path.join(work_dir or "", "database_tuning_record.json")
        if work_dir and os.path.exists(records) and os.path.getsize(records):
            break
        time.sleep(0.5)
    assert proc.poll() is None and work_dir, proc.stderr.read()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    cut = json.loads(report_path.read_text())["workloads"][SPEC]
    assert cut["runs"] == {} and cut["pending"] == {"stock": work_dir}
    table = (out / "compare.md").read_text()
    assert f"| `{SPEC}` | not run | not run |" in table and f"`{SPEC}` stock: unfinished" in table
    assert [p["round"] for p in cut["partial"]["stock"]["curve"]] == list(range(len(record_lines(work_dir)) // 8))
    kept = record_lines(work_dir)
    assert len(kept) in (8, 16)

    assert main(args) == 0
    entry = json.loads(report_path.read_text())["workloads"][SPEC]
    run = entry["runs"]["stock"]
    assert entry["pending"] == {} and entry["partial"] == {} and run["work_dir"] == work_dir and run["calls"] == 2
    curve = run["curve"]
    assert [p["round"] for p in curve] == [0, 1, 2] and [p["trials"] for p in curve] == [8, 16, 24]
    assert [p["call"] for p in curve] == [0] * (len(kept) // 8) + [1] * (3 - len(kept) // 8)
    assert all(a["wall_s"] < b["wall_s"] for a, b in zip(curve, curve[1:]))
    assert all(a["best_latency_s"] >= b["best_latency_s"] for a, b in zip(curve, curve[1:]))
    assert record_lines(work_dir)[:len(kept)] == kept and len(record_lines(work_dir)) == 24
    assert "resumed: 2 calls" in (out / "compare.md").read_text()

    # One call more on the same work dir: its XGB model first learns all 24 records.
    result = tune_tir(parse_workload(SPEC).prim_func(), resolve_target("llvm").target, work_dir, 32,
                      strategy="stock", seed=0, num_trials_per_iter=8, progress=False)
    assert result.warmed_on == 24 and result.new_trials == 8
    assert [r["session"] for r in result.rounds][-1] == 2 and result.rounds[-1]["total_trials"] == 32


@pytest.mark.slow
def test_compare_counts_a_call_cut_before_its_first_round(tmp_path):
    """A call stopped before it measured anything leaves only its `pending` entry and call count; the
    next call's rounds carry that count (call 2 of 2), not the round log's count of calls that measured."""
    from ms_pruner.hardware import resolve_target
    from ms_pruner.tuning.compare import comparison_settings
    from ms_pruner.workloads import parse_workload

    out = tmp_path / "cmp"
    work_dir = str(out / "work" / "cut-before-round-0")
    out.mkdir()
    settings = comparison_settings(resolve_target("llvm"), 16, 8, 0, "pruner")
    cut = {"flops": parse_workload(SPEC).flops, "runs": {}, "pending": {"stock": work_dir}, "calls": {"stock": 1}}
    (out / "compare.json").write_text(json.dumps(dict(settings, workloads={SPEC: cut})))
    assert main(["compare", "--workload", SPEC, "--target", "llvm", "--trials", "16", "--per-iter", "8",
                 "--strategies", "stock", "--seed", "0", "--out", str(out), "--no-progress"]) == 0
    run = json.loads((out / "compare.json").read_text())["workloads"][SPEC]["runs"]["stock"]
    assert run["work_dir"] == work_dir and run["calls"] == 2 and run["best_instruction"] is None  # not a GPU's
    assert [(p["round"], p["call"]) for p in run["curve"]] == [(0, 1), (1, 1)]
    assert "round 0 (call 2)" in (out / "compare.md").read_text()


@pytest.mark.slow
def test_a_comparison_restored_on_another_machine_resumes_its_cut_run(tmp_path):
    """A comparison made elsewhere, cut with a run pending, is committed as compare.json plus an archive of its work
    dirs; restored under another --out (another machine's), `compare` resumes that run from its records there,
    and a comparison made under other settings is refused before anything is unpacked."""
    import shutil
    import tarfile

    from ms_pruner.errors import UserError
    from ms_pruner.hardware import resolve_target
    from ms_pruner.tuning import tune_tir
    from ms_pruner.tuning.compare import comparison_settings
    from ms_pruner.tuning.restore import restore_comparison
    from ms_pruner.workloads import parse_workload

    lent = tmp_path / "elsewhere" / "compare"
    cut_dir = lent / "work" / SPEC.replace(":", "_") / "stock-cut"
    choice = resolve_target("llvm")
    tune_tir(parse_workload(SPEC).prim_func(), choice.target, str(cut_dir), 8, strategy="stock", seed=0,
             num_trials_per_iter=8, progress=False)
    settings = comparison_settings(choice, 16, 8, 0, "pruner")
    cut = {"flops": parse_workload(SPEC).flops, "runs": {}, "pending": {"stock": str(cut_dir)}, "calls": {"stock": 1}}
    committed = tmp_path / "committed"
    (committed / "compare").mkdir(parents=True)
    (committed / "compare" / "compare.json").write_text(json.dumps(dict(settings, workloads={SPEC: cut})))
    with tarfile.open(committed / "work.tgz", "w:gz") as archive:
        archive.add(lent / "work", arcname="work")
    kept = record_lines(cut_dir)
    shutil.rmtree(tmp_path / "elsewhere")

    with pytest.raises(UserError, match="its runs cannot go on here"):
        restore_comparison(str(committed / "compare" / "compare.json"), str(committed / "work.tgz"),
                           str(tmp_path / "other"), comparison_settings(choice, 32, 8, 0, "pruner"))
    assert not (tmp_path / "other").exists()

    out = tmp_path / "here"
    restore_comparison(str(committed / "compare" / "compare.json"), str(committed / "work.tgz"), str(out), settings)
    with pytest.raises(UserError, match="already holds a comparison"):
        restore_comparison(str(committed / "compare" / "compare.json"), str(committed / "work.tgz"), str(out),
                           settings)
    assert main(["compare", "--workload", SPEC, "--target", "llvm", "--trials", "16", "--per-iter", "8",
                 "--strategies", "stock", "--seed", "0", "--out", str(out), "--no-progress"]) == 0
    run = json.loads((out / "compare.json").read_text())["workloads"][SPEC]["runs"]["stock"]
    moved = out / "work" / SPEC.replace(":", "_") / "stock-cut"
    assert run["work_dir"] == str(moved) and run["calls"] == 2
    assert [(p["round"], p["trials"], p["call"]) for p in run["curve"]] == [(0, 8, 0), (1, 16, 1)]
    assert record_lines(moved)[:8] == kept and len(record_lines(moved)) == 16


@pytest.mark.slow
def test_a_restored_finished_run_set_aside_is_made_again(tmp_path):
    """`restore --rerun` sets a finished run aside: the next `compare` makes it again in a new work dir beside
    the other strategies' kept runs, and compare.md still says what the earlier run reached."""
    import shutil
    import tarfile

    from ms_pruner.errors import UserError
    from ms_pruner.hardware import resolve_target
    from ms_pruner.tuning.compare import comparison_settings
    from ms_pruner.tuning.restore import restore_comparison

    lent = tmp_path / "elsewhere"
    args = ["compare", "--workload", SPEC, "--target", "llvm", "--trials", "8", "--per-iter", "8",
            "--strategies", "stock", "--seed", "0", "--no-progress"]
    assert main(args + ["--out", str(lent)]) == 0
    committed = tmp_path / "committed"
    (committed / "compare").mkdir(parents=True)
    shutil.copy(lent / "compare.json", committed / "compare" / "compare.json")
    with tarfile.open(committed / "work.tgz", "w:gz") as archive:
        archive.add(lent / "work", arcname="work")
    earlier = json.loads((lent / "compare.json").read_text())["workloads"][SPEC]["runs"]["stock"]
    shutil.rmtree(lent)

    report, archive = str(committed / "compare" / "compare.json"), str(committed / "work.tgz")
    settings = comparison_settings(resolve_target("llvm"), 8, 8, 0, "pruner")
    with pytest.raises(UserError, match="no finished pruner run"):
        restore_comparison(report, archive, str(tmp_path / "a"), settings, [(SPEC, "pruner")])
    with pytest.raises(UserError, match="no such workload"):
        restore_comparison(report, archive, str(tmp_path / "b"), settings, [("matmul:64x64x64:float32:float32",
                                                                              "stock")])
    out = tmp_path / "here"
    restored = restore_comparison(report, archive, str(out), settings, [(SPEC, "stock")])
    entry = restored["workloads"][SPEC]
    old_dir = out / "work" / SPEC.replace(":", "_") / os.path.basename(earlier["work_dir"])
    assert entry["runs"] == {} and [r["work_dir"] for r in entry["superseded"]["stock"]] == [str(old_dir)]
    assert len(record_lines(old_dir)) == 8

    assert main(args + ["--out", str(out)]) == 0
    entry = json.loads((out / "compare.json").read_text())["workloads"][SPEC]
    again = entry["runs"]["stock"]
    assert again["work_dir"] != str(old_dir) and again["calls"] == 1 and len(record_lines(again["work_dir"])) == 8
    assert entry["superseded"]["stock"][0]["best_latency_s"] == earlier["best_latency_s"]
    assert f"an earlier run (`{old_dir}`) was set aside" in (out / "compare.md").read_text()
