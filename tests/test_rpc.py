"""Measuring through TVM's RPC tracker: a real tracker and real servers on loopback, started here."""

import dataclasses
import json
import logging
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
import tvm

from ms_pruner.cli import main
from ms_pruner.database.records import is_valid, open_database
from ms_pruner.errors import UserError
from ms_pruner.hardware import llvm_target
from ms_pruner.tuning import tune_tir
from ms_pruner.tuning.fleet import LocalFleet, NoServerLeft, make_fleet_runner
from ms_pruner.workloads import parse_workload

SPEC = "matmul:128x128x128:float32:float32"
KEY = "cpu-test"


def _measured_by(fleet, index: int) -> int:
    with open(os.path.join(fleet.log_dir, f"server{index}.log")) as log:
        return log.read().count("load_module")


def fleet(tmp_path, servers: int) -> LocalFleet:
    return LocalFleet(str(tmp_path), KEY, servers)


def _records(work_dir) -> int:
    if not os.path.exists(os.path.join(work_dir, "database_tuning_record.json")):
        return 0
    return len(list(open_database(work_dir).get_all_tuning_records()))


def _when_records(work_dir, count: int, action) -> threading.Thread:
    """Run ``action`` once the work dir holds ``count`` records (a finished first round)."""
    def watch():
        while _records(work_dir) < count:
            time.sleep(0.2)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _resumer(process) -> threading.Timer:
    """A timer (not started) that resumes a stopped ``process`` after 60 s, so a test of a time limit
    fails, instead of hanging, where the limit is missing (the call ends once the server answers)."""
    resume = threading.Timer(60.0, lambda: os.killpg(process.pid, signal.SIGCONT))
    resume.daemon = True
    return resume


def _tune(work_dir, address, trials: int = 16):
    return main(["tune", SPEC, "--target", "llvm", "--trials", str(trials), "--per-iter", "8", "--seed", "0",
                 "--work-dir", str(work_dir), "--no-progress", "--rpc", address])


def _tune_on(runner, work_dir, trials: int):
    """``tune`` through the Python API, measuring with ``runner``."""
    return tune_tir(parse_workload(SPEC).prim_func(), llvm_target(), work_dir, trials, "pruner", runner=runner,
                    num_trials_per_iter=8, seed=0, progress=False)


@pytest.mark.slow
def test_a_run_measures_on_every_server_of_the_key(tmp_path, capsys):
    with fleet(tmp_path, 2) as running:
        assert _tune(tmp_path / "wd", str(running.tracker)) == 0
        assert "16 records (16 new)" in capsys.readouterr().out
        assert _measured_by(running, 0) > 0 and _measured_by(running, 1) > 0
        assert _measured_by(running, 0) + _measured_by(running, 1) == 16


@pytest.mark.slow
def test_a_server_killed_mid_run_costs_only_its_candidates(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 2) as running:
        _when_records(work_dir, 8, lambda: running.kill(running.servers[1]))
        assert _tune(work_dir, str(running.tracker), trials=24) == 0
        assert "24 records (24 new)" in capsys.readouterr().out
        assert running.tracker.servers() == 1 and _records(work_dir) == 24


@pytest.mark.slow
def test_a_server_that_hangs_mid_run_costs_only_the_candidate_it_held(tmp_path):
    """A stopped server keeps its connection, so the tracker still counts it: the candidate it held
    is a run error once the runner's time limit passes, and the other server measures the rest."""
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 2) as running:
        hung = running.servers[1]
        resume = _resumer(hung)
        _when_records(work_dir, 8, lambda: (os.killpg(hung.pid, signal.SIGSTOP), resume.start()))
        runner = make_fleet_runner(dataclasses.replace(running.tracker, timeout_s=5.0), llvm_target())
        result = _tune_on(runner, work_dir, 24)
        resume.cancel()
        records = list(open_database(work_dir).get_all_tuning_records())
        failed = sum(1 for record in records if not is_valid(record))
        assert len(records) == 24 and 1 <= failed <= 2 and result.best_latency_s < 1.0
        assert running.tracker.servers() == 2  # registered all along: only the time limit freed its candidate


@pytest.mark.slow
def test_each_batch_measures_on_as_many_servers_as_the_key_holds_then(tmp_path):
    """A server started between two calls on the same runner (a batch of a long model tune) takes
    work from the next batch; a killed one is no longer waited for; with none left the runner stops,
    and goes on once a server is back."""
    work_dir = str(tmp_path / "wd")

    def tune_to(trials: int):
        _tune_on(runner, work_dir, trials)

    with fleet(tmp_path, 1) as running:
        runner = make_fleet_runner(running.tracker, llvm_target())
        tune_to(8)
        assert runner.workers == 1
        running.add_server()
        tune_to(24)
        assert runner.workers == 2 and _records(work_dir) == 24 and _measured_by(running, 1) > 0
        running.kill(running.servers[0])
        tune_to(32)
        assert runner.workers == 1 and _records(work_dir) == 32
        running.kill(running.servers[1])
        with pytest.raises(NoServerLeft):
            tune_to(40)
        running.add_server()
        tune_to(40)
        assert _records(work_dir) == 40


@pytest.mark.slow
def test_a_fixed_count_of_candidates_at_once_holds_through_a_stop(tmp_path):
    """``workers=N`` is kept whatever the key holds, and a runner stopped for want of a server
    measures again, N at once, once one is back (its stopped pool is not reused)."""
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 1) as running:
        runner = make_fleet_runner(running.tracker, llvm_target(), workers=2)
        _tune_on(runner, work_dir, 8)
        assert runner.workers == 2
        running.kill(running.servers[0])
        with pytest.raises(NoServerLeft):
            _tune_on(runner, work_dir, 16)
        assert runner.workers is None
        running.add_server()
        _tune_on(runner, work_dir, 16)
        assert runner.workers == 2 and _records(work_dir) == 16 and _measured_by(running, 1) > 0


@pytest.mark.slow
def test_a_server_that_hangs_before_the_run_is_named_in_one_line(tmp_path, capsys):
    """The tracker hands out an idle server that was stopped; the device check's session with it is
    never answered (TVM sets no limit there), so the check gives up after ``--rpc-timeout``."""
    with fleet(tmp_path, 1) as running:
        hung = running.servers[0]
        os.killpg(hung.pid, signal.SIGSTOP)
        resume = _resumer(hung)
        resume.start()
        assert main(["tune", SPEC, "--target", "llvm", "--rpc", str(running.tracker), "--rpc-timeout", "3",
                     "--work-dir", str(tmp_path / "wd")]) == 2
        resume.cancel()
        assert capsys.readouterr().err.strip() == (
            f"ms-pruner: error: no server under key '{KEY}' at 127.0.0.1:{running.port} was done within 3 s: "
            "all were busy, or the one given hangs (restart it or take it off the key; --rpc-timeout gives longer)")


@pytest.mark.slow
def test_a_server_that_hangs_within_a_session_ends_the_call_in_one_line(tmp_path):
    """Stopped once its session began (what a check's kernel or a model's run meets when the server
    hangs mid-call): the call on that session is never answered, and the limit ends it."""
    with fleet(tmp_path, 1) as running:
        hung = running.servers[0]
        resume = _resumer(hung)

        def hang_then_ask(session):
            os.killpg(hung.pid, signal.SIGSTOP)
            resume.start()
            return tvm.runtime.tensor(np.zeros(4, "float32"), session.cpu(0))  # an input sent, as a check's are

        with pytest.raises(UserError, match="was done within 3 s"):
            dataclasses.replace(running.tracker, timeout_s=3.0).on_a_server(hang_then_ask)
        resume.cancel()


@pytest.mark.slow
def test_with_every_server_gone_the_run_stops_in_one_line_and_a_rerun_resumes(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 2) as running:
        _when_records(work_dir, 8, lambda: [running.kill(s) for s in running.servers])
        assert _tune(work_dir, str(running.tracker), trials=24) == 3
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"ms-pruner: error: no RPC server left for key '{KEY}'") and "rerun" in err
        kept = _records(work_dir)
        assert kept >= 8
        running.add_server()
        assert _tune(work_dir, str(running.tracker), trials=24) == 0
        assert f"24 records ({24 - kept} new)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_tracker_gone_mid_run_stops_it_in_one_line_and_another_tracker_resumes_it(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 1) as running:
        _when_records(work_dir, 8, lambda: running.kill(running.tracker_process))
        assert _tune(work_dir, str(running.tracker)) == 3
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (f"ms-pruner: error: the RPC tracker at 127.0.0.1:{running.port} no longer answers; "
                       "records measured so far are kept, rerun with it up to resume")
        kept = _records(work_dir)
        assert 8 <= kept < 16
    with fleet(tmp_path, 1) as running:
        assert _tune(work_dir, str(running.tracker)) == 0
        assert f"16 records ({16 - kept} new)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_tracker_that_hangs_mid_run_stops_it_in_one_line_and_resumes_it_once_it_answers(tmp_path, capsys):
    """A stopped tracker still accepts connections (its listening socket's backlog) and answers
    nothing: TVM's client would wait on it without end; each question here has a limit."""
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 1) as running:
        tracker = running.tracker_process
        _when_records(work_dir, 8, lambda: os.killpg(tracker.pid, signal.SIGSTOP))
        assert _tune(work_dir, str(running.tracker)) == 3
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (f"ms-pruner: error: the RPC tracker at 127.0.0.1:{running.port} no longer answers; "
                       "records measured so far are kept, rerun with it up to resume")
        kept = _records(work_dir)
        os.killpg(tracker.pid, signal.SIGCONT)
        assert _tune(work_dir, str(running.tracker)) == 0
        assert f"16 records ({16 - kept} new)" in capsys.readouterr().out


def test_an_address_where_no_tracker_answers_is_refused_at_once(tmp_path, capsys):
    """TVM's client retries a refused connection for a minute, warning every 5 s; the tune refuses
    at the first try, before a work dir is made."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retries, warnings = [], logging.Handler(logging.WARNING)
    warnings.emit = lambda record: retries.append(record) if f"'127.0.0.1', {port})" in record.getMessage() else None
    rpc_log = logging.getLogger("RPCServer")  # tvm.rpc.base's, which does not propagate
    rpc_log.addHandler(warnings)
    try:
        assert main(["tune", SPEC, "--target", "llvm", "--rpc", f"127.0.0.1:{port}:{KEY}",
                     "--work-dir", str(tmp_path / "wd")]) == 2
    finally:
        rpc_log.removeHandler(warnings)
    assert not retries, retries[0].getMessage()
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ms-pruner: error: no RPC tracker answers at 127.0.0.1:{port} (")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "wd").exists()


def test_an_address_where_something_else_answers_is_named_so(tmp_path, capsys):
    """An RPC server's port given for the tracker's (9090 for 9190): a server closes a session that
    opens with the tracker's magic; TVM's client would say only "connection reset"."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True).start()
        assert main(["tune", SPEC, "--target", "llvm", "--rpc", f"127.0.0.1:{port}:{KEY}",
                     "--work-dir", str(tmp_path / "wd")]) == 2
    assert capsys.readouterr().err.strip() == (f"ms-pruner: error: what answers at 127.0.0.1:{port} is not a TVM RPC "
                                               "tracker (a server's port?): correct --rpc HOST:PORT:KEY")
    assert not (tmp_path / "wd").exists()


def test_a_session_limit_is_taken_with_rpc_alone_and_above_zero(capsys):
    assert main(["tune", SPEC, "--target", "llvm", "--rpc-timeout", "30"]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --rpc-timeout goes with --rpc HOST:PORT:KEY"
    assert main(["check", "--work-dir", "wd", "--rpc", "127.0.0.1:9190:k", "--rpc-timeout", "0"]) == 2
    assert capsys.readouterr().err.strip() == "ms-pruner: error: --rpc-timeout must be positive, got 0"


def test_a_cuda_target_is_refused_where_the_servers_have_no_cuda_device(tmp_path, capsys):
    with fleet(tmp_path, 1) as running:
        assert main(["tune", "matmul:256x256x256:float16:float32", "--target", "cuda", "--gpu", "h100",
                     "--space", "wmma", "--trials", "8", "--work-dir", str(tmp_path / "wd"), "--rpc",
                     str(running.tracker)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"ms-pruner: error: the servers under key '{KEY}' have no cuda device; target cuda refused"
        assert not (tmp_path / "wd").exists() and _measured_by(running, 0) == 0
        assert main(["tune", SPEC, "--target", "llvm", "--trials", "8", "--work-dir", str(tmp_path / "wd"),
                     "--rpc", f"127.0.0.1:{running.port}:{KEY}-typo"]) == 2
        assert capsys.readouterr().err.strip() == (f"ms-pruner: error: the RPC tracker at 127.0.0.1:{running.port} "
                                                   f"holds no server for key '{KEY}-typo'; servers by key: '{KEY}' (1)")
        assert not (tmp_path / "wd").exists()
    assert main(["tune", SPEC, "--target", "llvm", "--rpc", "localhost:nine:key"]) == 2
    assert "--rpc takes HOST:PORT:KEY" in capsys.readouterr().err


@pytest.mark.slow
def test_a_runs_best_kernels_are_checked_and_measured_again_on_the_servers(tmp_path, capsys):
    """``check --rpc`` and ``remeasure --rpc``: the kernels built here, run on the key's server (its
    log counts their loads), the outputs held against the exact result here."""
    work_dir = str(tmp_path / "wd")
    with fleet(tmp_path, 1) as running:
        assert _tune(work_dir, str(running.tracker), trials=8) == 0
        loaded = _measured_by(running, 0)
        capsys.readouterr()
        assert main(["check", "--work-dir", work_dir, "--workload", SPEC, "--target", "llvm", "--top", "2",
                     "--rpc", str(running.tracker), "--json"]) == 0
        checks = json.loads(capsys.readouterr().out)
        assert [c["rank"] for c in checks] == [1, 2] and all(c["passed"] and c["error"] < 1e-5 for c in checks)
        assert all(c["torch_error"] is None and c["failure"] is None for c in checks), checks
        assert _measured_by(running, 0) == loaded + 2
        assert main(["remeasure", "--db", work_dir, "--target", "llvm", "--top", "2", "--rpc", str(running.tracker),
                     "--json"]) == 0
        report = json.loads(capsys.readouterr().out)  # the in-process tune left MetaSchedule's console on stderr
        assert report["rpc"] == str(running.tracker) and _measured_by(running, 0) == loaded + 4
        assert report["work_dirs"][work_dir]["summary"]["measured"] == 2


@pytest.mark.slow
def test_a_model_and_a_comparison_are_measured_on_the_servers_and_the_model_runs_there(tmp_path, capsys):
    """``tune-model --rpc``: every task's candidates, then the compiled model itself, run on the
    server (its log counts the loads) and the outputs match torch; torch is not timed beside it.
    ``compare --rpc``: both strategies measured there, and no vendor time from this machine."""
    from ms_pruner.models.report import model_table, read_summaries

    work_dir = str(tmp_path / "model")
    with fleet(tmp_path, 1) as running:
        assert main(["tune-model", "--model", "mlp-tiny", "--target", "llvm", "--trials", "8", "--per-iter", "4",
                     "--work-dir", work_dir, "--no-progress", "--rpc", str(running.tracker)]) == 0
        out = capsys.readouterr().out
        assert "outputs match torch" in out and f"on a server of {running.tracker} | torch not timed" in out
        assert _records(work_dir) == 8 and _measured_by(running, 0) == 8 + 1
        (summary,) = read_summaries([work_dir])
        assert summary["rpc"] == str(running.tracker) and summary["torch_eager_s"] is None
        assert f"| mlp-tiny (float32) | llvm (a server of {running.tracker}) | pruner | 8 |" in model_table([summary])
        out_dir = tmp_path / "compare"
        assert main(["compare", "--workload", SPEC, "--trials", "8", "--per-iter", "8", "--target", "llvm",
                     "--out", str(out_dir), "--no-progress", "--rpc", str(running.tracker)]) == 0
        entry = json.loads((out_dir / "compare.json").read_text())["workloads"][SPEC]
        assert sorted(entry["runs"]) == ["pruner", "stock"] and entry.get("reference") is None
        assert _measured_by(running, 0) == 9 + 16
