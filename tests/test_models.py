"""Whole models through Relax on llvm: the CLI and the Python API, several tasks with PrunerSearch."""

import json
import os

import numpy as np
import pytest

from conftest import needs_nvcc
from ms_pruner.cli import main
from ms_pruner.models import (compare_outputs, extract_tasks, get_model, import_torch_model, run_executable,
                              run_library)
from ms_pruner.models.report import model_table, read_summaries


def _tasks_in_database(work_dir):
    from ms_pruner.tuning import open_database

    import tvm_ffi

    return {int(tvm_ffi.structural_hash(r.workload.mod)) for r in open_database(work_dir).get_all_tuning_records()}


@pytest.mark.slow
def test_tune_relax_python_api(tmp_path, caplog):
    """A budget too small to reach every task is said before tuning (MetaSchedule's task scheduler
    gives each task a round in turn), the result counts each task's records, and a second call into
    the same work dir tunes the task the first left untuned."""
    import ms_pruner
    from ms_pruner.hardware import llvm_target

    module, example, spec = get_model("mlp-tiny")
    target = llvm_target()
    mod = import_torch_model(module, example)
    tasks = extract_tasks(mod, target)
    weights = sorted(float(t.weight) for t in tasks)
    assert len(tasks) == 2 and weights == [1.0, 2.0]  # fc2 and fc3 share one task
    first = ms_pruner.tune_relax(mod, None, target, str(tmp_path), max_trials_global=4, strategy="pruner",
                                 num_trials_per_iter=4, progress=False)
    assert "4 trials at 4 a round may reach only 1 of the model's 2 tasks" in caplog.text
    assert "--trials 8 or --per-iter 2 reaches every task" in caplog.text
    assert sorted(first.task_records) == [0, 4]
    caplog.clear()
    result = ms_pruner.tune_relax(mod, None, target, str(tmp_path), max_trials_global=12, strategy="pruner",
                                  num_trials_per_iter=4, progress=False)
    assert "may reach only" not in caplog.text
    assert sorted(result.task_records) == [4, 12] or sorted(result.task_records) == [8, 8], result.task_records
    assert sorted(result.task_weights) == [1.0, 2.0]
    assert len(_tasks_in_database(str(tmp_path))) == len(tasks)
    outputs, seconds = run_executable(result.executable, target, [example.numpy()])
    assert seconds > 0
    want = module(example).detach().numpy()
    assert compare_outputs(outputs, [want], spec.dtype) is None
    library = str(tmp_path / "model.tar")  # a .tar: load_module links it
    ms_pruner.export_model(result.executable, "llvm", library)  # a target as --target names it
    assert compare_outputs(run_library(library, target, [example.numpy()]), [want], spec.dtype) is None
    assert sum(r["trials"] for r in result.rounds) == 12
    assert {r["task_id"] for r in result.rounds} == {0, 1}
    # The scheduler searches, builds and runs a batch of each task before it closes their rounds:
    # each round's line still holds its own task's search (PrunerSearch's split) and timings.
    assert [r["strategy"]["task"] for r in result.rounds] == [result.tasks[r["task_id"]] for r in result.rounds]
    assert all(r["search_s"] > 0 and r["build_s"] > 0 and r["run_s"] > 0 for r in result.rounds), result.rounds


def _runs_as_torch_does(library: str, name: str) -> None:
    """The exported model, loaded by TVM's runtime alone and run by a Relax VM on the inputs alone
    (the weights are inside), against the torch module's output."""
    import torch
    import tvm
    from tvm import relax

    module, example, _ = get_model(name)
    vm = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
    (got,) = vm["main"](tvm.runtime.tensor(example.numpy()))  # torch.export gives a tuple of outputs
    with torch.no_grad():
        want = module(example).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def _a_library_that_disagrees_is_removed(library: str, tmp_path) -> None:
    """The check ``--export`` makes of the library it wrote, held against outputs it cannot match."""
    import shutil

    from ms_pruner.cli.models import _library_check
    from ms_pruner.errors import UserError
    from ms_pruner.hardware import resolve_target

    module, example, spec = get_model("mlp-tiny")
    copy = str(tmp_path / "copy.so")
    shutil.copy(library, copy)
    wrong = [module(example).detach().numpy() + 1.0]
    with pytest.raises(UserError, match=r"copy.so, loaded again: output 0 differs from torch.*; removed"):
        _library_check(copy, resolve_target("llvm"), [example.numpy()], wrong, spec, "torch")
    assert not os.path.exists(copy)
    garbage = tmp_path / "garbage.so"  # another name: dlopen keeps the copy's handle by its path
    garbage.write_bytes(b"no library")
    with pytest.raises(UserError, match=r"garbage.so, loaded again: it does not run here: .*; removed"):
        _library_check(str(garbage), resolve_target("llvm"), [example.numpy()], wrong, spec, "torch")
    assert not garbage.exists()


@pytest.mark.slow
def test_tune_model_cli(tmp_path, capsys):
    """``--trials`` counts the records the work dir holds, as ``tune``'s does: a second call with a
    larger budget tunes the rest, the task the first never reached first, its round log going on;
    a third finds nothing left and compiles what the database holds."""
    import json

    work_dir = str(tmp_path / "wd")
    command = ["tune-model", "--model", "mlp-tiny", "--target", "llvm", "--per-iter", "4", "--work-dir", work_dir,
               "--no-torch-compile", "--no-progress"]
    assert main(command + ["--trials", "4"]) == 0
    assert "tasks with no record (a default schedule): 1" in capsys.readouterr().out
    (reached,) = [json.loads(line)["strategy"]["task"] for line in open(f"{work_dir}/logs/ms_pruner_rounds.jsonl")]
    assert main(command + ["--trials", "16"]) == 0
    out = capsys.readouterr().out
    assert "2 tasks tuned with pruner" in out and "outputs match torch" in out and "torch eager" in out
    assert "with no record" not in out
    rounds = [json.loads(line) for line in open(f"{work_dir}/logs/ms_pruner_rounds.jsonl")]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3] and [r["session"] for r in rounds] == [0, 1, 1, 1]
    assert rounds[1]["strategy"]["task"] != reached and rounds[-1]["total_trials"] == 16
    assert rounds[1]["wall_s"] > rounds[0]["wall_s"]
    library = str(tmp_path / "deploy" / "mlp.so")
    assert main(command + ["--trials", "16", "--export", library]) == 0
    out = capsys.readouterr().out
    assert "2 tasks tuned with pruner (16 trials)" in out
    assert f"wrote {library}, loaded again, outputs match torch" in out
    assert len(open(f"{work_dir}/logs/ms_pruner_rounds.jsonl").readlines()) == 4
    _runs_as_torch_does(library, "mlp-tiny")
    _a_library_that_disagrees_is_removed(library, tmp_path)
    assert main(command + ["--export", str(tmp_path / "mlp.o")]) == 2
    assert "--export" in capsys.readouterr().err  # refused before a round: the log keeps its 4
    assert len(open(f"{work_dir}/logs/ms_pruner_rounds.jsonl").readlines()) == 4
    assert len(_tasks_in_database(work_dir)) == 2
    # Without --trials: a round of --per-iter for each task.
    assert main(["tune-model", "--model", "mlp-tiny", "--target", "llvm", "--per-iter", "2", "--work-dir",
                 str(tmp_path / "default"), "--no-torch-compile", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 tasks tuned with pruner (4 trials)" in out and "with no record" not in out
    # Each task's best kernel run again here against its own unscheduled function.
    assert main(["check", "--work-dir", work_dir, "--target", "llvm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("ok   matmul+T_add+compute(") for line in lines), lines
    summary, = read_summaries([work_dir])
    assert summary["outputs_match"] and summary["tasks"] == summary["tasks_with_records"] == 2
    assert summary["latency_s"] > 0
    table = model_table([summary, dict(summary, strategy="stock", outputs_match=False, mismatch="output 0 differs")])
    assert "| mlp-tiny (float32) | llvm | pruner | 16 | 2 (2) |" in table and "output 0 differs" in table
    assert main(["model-table", work_dir, "--out", str(tmp_path / "models.md")]) == 0
    assert (tmp_path / "models.md").read_text() == model_table([summary])
    assert main(["model-table", str(tmp_path / "none")]) == 2
    assert "cannot read a tune-model summary" in capsys.readouterr().err


@pytest.mark.slow
def test_parts_drop_into_metaschedules_own_tune_relax(tmp_path):
    """PrunerSearch, PaCM and our builder passed to ``ms.relax_integration.tune_relax`` itself: the
    task contexts clone one PrunerSearch, each task gets its own search and its records, and the
    model MetaSchedule compiles from them computes what torch does. (MetaSchedule's logging set-up
    crashes on a handler it did not name, which earlier tests of this process may have left on its
    logger: the guard our own entry points use takes them off meanwhile.)"""
    from tvm.s_tir import meta_schedule as ms

    import ms_pruner
    from ms_pruner.hardware import llvm_target
    from ms_pruner.models import legalize_and_fuse
    from ms_pruner.tuning.driver import metaschedule_logging_guard

    module, example, spec = get_model("mlp-tiny")
    target = llvm_target()
    mod = legalize_and_fuse(import_torch_model(module, example))
    timings = []
    with metaschedule_logging_guard():
        database = ms.relax_integration.tune_relax(
            mod, None, target, str(tmp_path), max_trials_global=16, num_trials_per_iter=8,
            strategy=ms_pruner.PrunerSearch(timings=timings), cost_model=ms_pruner.PaCM(),
            builder=ms_pruner.make_builder(), seed=0)
    assert len(_tasks_in_database(str(tmp_path))) == 2
    assert len(database.get_all_tuning_records()) == 16
    assert sorted(stats["task"] for stats in timings) == sorted(t.task_name for t in extract_tasks(mod, target))
    executable = ms.relax_integration.compile_relax(database, mod, target, params=None)
    outputs, _ = run_executable(executable, target, [example.numpy()])
    assert compare_outputs(outputs, [module(example).detach().numpy()], spec.dtype) is None


TAGGER = """
import torch


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.proj = torch.nn.Linear(32, 48)

    def forward(self, ids, scale):
        return torch.relu(self.proj(self.embed(ids))) * scale


def build():
    return Tagger(), (torch.randint(0, 100, (4, 10)), torch.rand(4, 10, 48))
"""


@pytest.mark.slow
def test_a_users_model_file_with_token_ids_is_tuned_checked_and_timed(tmp_path, capsys):
    """``--model FILE.py:FUNCTION`` with two inputs, one of them integer token ids: every task gets
    valid records (the embedding's gather too: the runner's integer arguments are zeros), the
    compiled model computes what torch does, and ``check`` holds every task's best kernel against
    its unscheduled function (the gather's ids drawn inside the table)."""
    (tmp_path / "tagger_model.py").write_text(TAGGER)
    work_dir = str(tmp_path / "wd")
    assert main(["tune-model", "--model", f"{tmp_path}/tagger_model.py:build", "--target", "llvm", "--per-iter",
                 "4", "--work-dir", work_dir, "--no-torch-compile", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tagger_model:build (float32 compute, input ((4, 10), (4, 10, 48))) on llvm" in out, out
    assert "outputs match torch" in out and "with no record" not in out and "torch eager" in out
    summary, = read_summaries([work_dir])
    assert summary["model"] == "tagger_model:build" and summary["tasks"] == summary["tasks_with_records"] >= 4
    assert main(["check", "--work-dir", work_dir, "--target", "llvm", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    assert len(checks) == summary["tasks"] and all(c["passed"] for c in checks), checks
    assert any("take(100x32:float32, 40:int32" in c["workload"] for c in checks), [c["workload"] for c in checks]
    # One task alone, by the name db list gives it; a name no task has is one line pointing to db list.
    gather = next(c for c in checks if "take(" in c["workload"])
    name = gather["workload"].rsplit(" on ", 1)[0]
    assert main(["check", "--work-dir", work_dir, "--workload", name, "--target", "llvm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [gather]
    unknown = name.replace("100x32", "99x32")
    assert main(["check", "--work-dir", work_dir, "--workload", unknown, "--target", "llvm"]) == 2
    assert f"ms-pruner db list {work_dir}" in capsys.readouterr().err


@pytest.mark.parametrize("source, function, message", [
    (None, "build", "no file"),
    ("import torch\n", "build", "defines no function or Relax IRModule 'build'"),
    ("import torch\nraise ValueError('bad weights')\n", "build", "importing"),
    ("def build():\n    raise RuntimeError('no data')\n", "build", "build() failed: RuntimeError: no data"),
    ("import torch\ndef build():\n    return torch.nn.Linear(2, 2)\n", "build", "must return (torch.nn.Module"),
    ("import torch\ndef build():\n    return torch.nn.Linear(2, 2), [1.0]\n", "build", "must return"),
])
def test_a_model_file_that_cannot_give_a_model_is_one_line(tmp_path, capsys, source, function, message):
    path = tmp_path / "model.py"
    if source is not None:
        path.write_text(source)
    assert main(["tune-model", "--model", f"{path}:{function}", "--target", "llvm", "--work-dir",
                 str(tmp_path / "wd")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"ms-pruner: error: --model {path}:{function}: "), err
    assert message in err, err


RELAX_FILE = """
from tvm.script import ir as I, relax as R, tirx as T


@I.ir_module
class Net:
    @R.function
    def main(x: R.Tensor((16, 64), "float32"), w: R.Tensor((64, 32), "float32")) -> R.Tensor((16, 32), "float32"):
        with R.dataflow():
            z = R.nn.relu(R.matmul(x, w))
            R.output(z)
        return z


@I.ir_module
class Symbolic:
    @R.function
    def main(x: R.Tensor(("n", 64), "float32")) -> R.Tensor(("n", 64), "float32"):
        return x


@I.ir_module
class Pair:
    @R.function
    def main(x: R.Tuple(R.Tensor((4,), "float32"), R.Tensor((4,), "float32"))) -> R.Tensor((4,), "float32"):
        return x[0]


@I.ir_module
class Half:
    @R.function
    def main(x: R.Tensor((4,), "float16")) -> R.Tensor((4,), "float16"):
        return x


@T.prim_func(s_tir=True)
def kernel(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("B"):
            vi = T.axis.spatial(4, i)
            B[vi] = A[vi]


def built():
    return Net
"""


@pytest.mark.slow
def test_a_users_relax_module_is_tuned_and_held_against_tvms_default_build(tmp_path, capsys):
    """``--model FILE.py:NAME`` naming a Relax IRModule (or a function returning one): tuned at
    main's shapes on random inputs, its outputs held against TVM's build with no record, whose
    latency is reported beside (there is no torch module)."""
    path, work_dir = tmp_path / "nets.py", str(tmp_path / "wd")
    path.write_text(RELAX_FILE)
    assert main(["tune-model", "--model", f"{path}:Net", "--target", "llvm", "--per-iter", "4", "--work-dir", work_dir,
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "nets:Net (float32 compute, input ((16, 64), (64, 32))) on llvm: 1 tasks tuned with pruner" in out, out
    assert "TVM's default build (no record)" in out and "outputs match TVM's default build (1 output(s))" in out
    summary, = read_summaries([work_dir])
    assert summary["default_build_s"] > 0 and summary["torch_eager_s"] is None and summary["outputs_match"]
    assert "| nets:Net (float32) | llvm | pruner | 4 | 1 (1) |" in model_table([summary])
    assert model_table([summary]).rstrip().endswith(" | - | - | " + f"{summary['default_build_s'] * 1e6:.1f}"
                                                    + " | match TVM's default build |")
    assert main(["check", "--work-dir", work_dir, "--target", "llvm"]) == 0
    assert capsys.readouterr().out.startswith("ok   ")


@pytest.mark.parametrize("name, extra, message", [
    ("Symbolic", [], "main's parameter 'x' has a symbolic shape"),
    ("Pair", [], "main's parameter 'x' is a TupleType, not a tensor of known shape"),
    ("Half", ["--dtype", "float32"], "its main takes float16 inputs; drop --dtype float32"),
    ("kernel", [], "'kernel' is TensorIR with no Relax main; a kernel is tuned with 'ms-pruner tune "),
])
def test_a_relax_module_that_cannot_be_tuned_as_given_is_one_line(tmp_path, capsys, name, extra, message):
    path = tmp_path / "nets.py"
    path.write_text(RELAX_FILE)
    assert main(["tune-model", "--model", f"{path}:{name}", "--target", "llvm", "--work-dir",
                 str(tmp_path / "wd")] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"ms-pruner: error: --model {path}:{name}: "), err
    assert message in err, err
    assert not (tmp_path / "wd").exists()


def test_mismatch_is_reported_with_its_size():
    want = [np.zeros((2, 3), dtype=np.float32)]
    got = [np.zeros((2, 3), dtype=np.float32)]
    assert compare_outputs(got, want, "float32") is None
    got[0][1, 2] = 0.5
    message = compare_outputs(got, want, "float32")
    assert message.startswith("output 0 differs from torch: max abs diff 0.5 at flat index 5")
    assert "shape" in compare_outputs([np.zeros(3)], want, "float32")


def test_unknown_model_is_one_line(capsys):
    assert main(["tune-model", "--model", "gpt-9", "--target", "llvm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ms-pruner: error: unknown model 'gpt-9'; known: bert-layer, mlp-tiny, resnet-block")


@pytest.mark.parametrize("name", ["bert-layer", "resnet-block"])
def test_gpu_models_import_and_extract_tensor_core_tasks(name, tensor_intrinsics):
    """The fp16 models import through torch.export and yield tasks on a tensor-core target."""
    from ms_pruner.hardware import get_gpu_spec

    module, example, spec = get_model(name)
    mod = import_torch_model(module, example, nhwc=spec.nhwc, mixed_precision=True)
    tasks = extract_tasks(mod, get_gpu_spec("h100").target())
    assert spec.dtype == "float16" and len(tasks) >= 5
    main_ops = [t for t in tasks if "matmul" in t.task_name or "conv2d" in t.task_name]
    assert main_ops, [t.task_name for t in tasks]
    script = main_ops[0].dispatched[0].script()
    assert '"float16"' in script and '"float32"' in script  # fp16 operands, fp32 accumulation


def _built_tensor_core_record(task, target, family="wmma"):
    """A database record for ``task`` of a ``family`` candidate our builder builds, as tuning would
    leave one (its latency is not read when compiling)."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.builder import lower_candidate
    from ms_pruner.search import DesignSpace
    from ms_pruner.space import sketch_family, tuning_space

    mod = task.dispatched[0]
    _, target, generator = tuning_space(family, mod, target)
    for sch in DesignSpace(mod, target, generator).sample(8, seed=1):
        if sketch_family(sch.trace) != family:
            continue
        try:
            lower_candidate(sch.mod, target)
        except Exception:  # pylint: disable=broad-except  # a build error in tuning: not recorded
            continue
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        return sch.trace, mod, target, args
    raise AssertionError(f"no {family} candidate of {task.task_name} builds")


def _compiled_kernels(executable, target, library: str) -> str:
    """Every CUDA module of a VM executable compiled with nvcc and packed as ``tune-model --export``
    writes the model (and ``--rpc`` sends it to a server): cubin, not source; their source, joined."""
    from ms_pruner.builder import cuda_modules, device_module_formats
    from ms_pruner.models import export_model

    export_model(executable, target, library)
    sources = [m.inspect_source("") for m in cuda_modules(executable.mod)]
    assert sources and device_module_formats(library) == ["cubin"] * len(sources)
    return "\n".join(sources)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name, family", [("bert-layer", "wmma"), ("resnet-block", "wmma"), ("bert-layer", "mma")])
def test_fp16_models_compile_for_cuda_from_an_empty_and_a_partial_database(name, family, tensor_intrinsics, tmp_path):
    """Both fp16 models compiled for an H100 without a GPU, every kernel through nvcc: from an empty
    database (DLight schedules every function) and from one holding a tuned record of one task:
    a WMMA one, which MetaSchedule's own ``compile_relax`` rejects at lowering (models/compile.py;
    this draw writes back 3 fp16 lanes a thread, builder/odd_lanes.py), or an mma one, whose copies
    compile to cp.async as the builder's did (builder/copy_lanes.py)."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.models import compile_tuned

    module, example, spec = get_model(name)
    mod = import_torch_model(module, example, nhwc=spec.nhwc, mixed_precision=True)
    target = get_gpu_spec("h100").target()
    untuned = _compiled_kernels(compile_tuned(ms.database.MemoryDatabase(), mod, target), target,
                                str(tmp_path / "untuned.tar"))
    assert "__global__" in untuned and "wmma::" not in untuned

    record = None
    for task in (t for t in extract_tasks(mod, target) if "matmul" in t.task_name or "conv2d" in t.task_name):
        try:
            record = _built_tensor_core_record(task, target, family)
            break
        except AssertionError:  # the mma rule takes plain GEMM blocks, not every fused one
            continue
    trace, task_mod, task_target, args = record
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task_mod)
    database.commit_tuning_record(ms.database.TuningRecord(trace, workload, [1e-3], task_target, args))
    tuned = _compiled_kernels(compile_tuned(database, mod, target), target, str(tmp_path / "tuned.tar"))
    if family == "mma":
        assert "mma.sync.aligned" in tuned and "cp.async" in tuned and "int32x8" not in tuned
        return
    assert "wmma::mma_sync" in tuned
    with pytest.raises(Exception, match="tvm_access_ptr element type must match|even number of lanes for half"):
        ms.relax_integration.compile_relax(database, mod, target, params=None)
