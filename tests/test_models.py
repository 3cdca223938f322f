"""Whole models through Relax on llvm: the CLI and the Python API, several tasks with PrunerSearch."""

import numpy as np
import pytest

from ms_pruner.cli import main
from ms_pruner.models import compare_outputs, extract_tasks, get_model, import_torch_model, run_executable
from ms_pruner.models.report import model_table, read_summaries


def _tasks_in_database(work_dir):
    from ms_pruner.tuning import open_database

    import tvm_ffi

    return {int(tvm_ffi.structural_hash(r.workload.mod)) for r in open_database(work_dir).get_all_tuning_records()}


@pytest.mark.slow
def test_tune_relax_python_api(tmp_path):
    import ms_pruner
    from ms_pruner.hardware import llvm_target

    module, example, spec = get_model("mlp-tiny")
    target = llvm_target()
    mod = import_torch_model(module, example)
    tasks = extract_tasks(mod, target)
    weights = sorted(float(t.weight) for t in tasks)
    assert len(tasks) == 2 and weights == [1.0, 2.0]  # fc2 and fc3 share one task
    result = ms_pruner.tune_relax(mod, None, target, str(tmp_path), max_trials_global=16, strategy="pruner",
                                  num_trials_per_iter=4, progress=False)
    assert sorted(result.task_weights) == [1.0, 2.0]
    assert len(_tasks_in_database(str(tmp_path))) == len(tasks)
    outputs, seconds = run_executable(result.executable, target, [example.numpy()])
    assert seconds > 0
    want = module(example).detach().numpy()
    assert compare_outputs(outputs, [want], spec.dtype) is None
    assert sum(r["trials"] for r in result.rounds) == 16
    assert {r["task_id"] for r in result.rounds} == {0, 1}


@pytest.mark.slow
def test_tune_model_cli(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    assert main(["tune-model", "--model", "mlp-tiny", "--target", "llvm", "--trials", "16", "--per-iter", "4",
                 "--work-dir", work_dir, "--no-torch-compile", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 tasks tuned with pruner" in out and "outputs match torch" in out and "torch eager" in out
    assert len(_tasks_in_database(work_dir)) == 2
    summary, = read_summaries([work_dir])
    assert summary["outputs_match"] and summary["tasks"] == 2 and summary["latency_s"] > 0
    table = model_table([summary, dict(summary, strategy="stock", outputs_match=False, mismatch="output 0 differs")])
    assert "| mlp-tiny (float32) | llvm | pruner | 16 | 2 |" in table and "output 0 differs" in table


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
