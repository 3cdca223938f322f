"""``tune-model`` and ``model-table``: whole torch models through Relax, next to torch; a user's Relax
module next to TVM's default build of it."""

from __future__ import annotations

import argparse
import os
import sys

from ..cost_model import read_model_file
from ..errors import UserError, last_line, require_library_name
from ..hardware import add_target_options, resolve_target
from ..models import (DEFAULT_BUILD, RelaxModel, compare_outputs, default_build, export_model, get_model,
                      import_torch_model, prepared_relax, run_executable, run_library, torch_latency, tune_relax)
from ..models.report import model_table, read_summaries, write_summary
from ..models.user_model import example_inputs
from ..search import parse_settings
from ..tuning.fleet import tracker_of
from ..units import microseconds
from .options import add_out, add_rpc, add_search_options, add_time_limit, seed_value, write_text


def add_model_commands(sub) -> None:
    model = sub.add_parser("tune-model", help="tune a whole torch model (or a Relax module) through Relax and check it")
    model.add_argument("--model", required=True,
                       help="bert-layer | resnet-block | mlp-tiny | FILE.py:FUNCTION (your own: FUNCTION() returns "
                            "(torch module, example input tensor or tuple of tensors), or a Relax IRModule; "
                            "docs/usage.md)")
    add_target_options(model)
    model.add_argument("--trials", type=int, default=None,
                       help="trials over all tasks, counting those the work dir already holds (a rerun resumes); "
                            "default: a round of --per-iter for each task")
    model.add_argument("--per-iter", type=int, default=64)
    model.add_argument("--strategy", default="pruner", help="stock | pruner | moa")
    model.add_argument("--pretrained", default=None)
    model.add_argument("--dtype", default=None, help="float16 | float32 (default: the model's)")
    model.add_argument("--work-dir", default=None)
    model.add_argument("--seed", type=seed_value, default=0)
    model.add_argument("--torch-compile", action=argparse.BooleanOptionalAction, default=True,
                       help="also time torch.compile (skipped with --no-torch-compile)")
    model.add_argument("--no-progress", action="store_true")
    model.add_argument("--export", default=None, metavar="MODEL.so",
                       help="write the compiled model here (.so, or .tar to link) once its outputs match: "
                            "relax.VirtualMachine(tvm.runtime.load_module(MODEL.so), device)['main'](*inputs)")
    add_search_options(model)
    add_rpc(model)
    add_time_limit(model)
    model.set_defaults(func=cmd_tune_model)
    _add_model_table_command(sub)


def cmd_tune_model(args) -> int:
    settings = parse_settings(args.pruner_settings)
    if args.export:
        require_library_name("--export", args.export)
    if args.pretrained:
        read_model_file(args.pretrained)
    tracker = tracker_of(args)
    choice = resolve_target(args.target, args.gpu, require_device=tracker is None)
    module, example, spec = get_model(args.model, dtype=args.dtype)
    work_dir = args.work_dir or os.path.join("ms_pruner_work", f"{_dir_name(spec.name)}-{choice.target.kind.name}")
    nhwc, mixed = spec.nhwc and choice.is_cuda, spec.dtype == "float16"
    if isinstance(module, RelaxModel):
        relax_mod, inputs = prepared_relax(module.mod, nhwc, mixed and module.dtype != "float16"), list(example)
    else:
        relax_mod = import_torch_model(module, example, nhwc, mixed)
        inputs = [x.numpy() for x in example_inputs(example)]
    result = tune_relax(relax_mod, None,
                        choice.target, work_dir, args.trials, strategy=args.strategy, seed=args.seed,
                        num_trials_per_iter=args.per_iter, pretrained=args.pretrained,
                        progress=not args.no_progress, space=args.space, first_round=args.first_round,
                        cost_model=args.cost_model, rpc=tracker, warm_start=args.warm_start,
                        pruner_settings=settings, resume=True)

    def run(executable):
        return run_executable(executable, choice.target, inputs, tracker=tracker)

    outputs, seconds = run(result.executable)
    untuned = sum(1 for count in result.task_records if count == 0)
    print(f"{spec.name} ({spec.dtype} compute, input {tuple(spec.input_shape)}) on {choice.target.kind.name}: "
          f"{len(result.tasks)} tasks tuned with {args.strategy} ({result.trials} trials) in {work_dir}"
          + (f"; tasks with no record (a default schedule): {untuned}" if untuned else ""))
    reference, expected, baselines, line = _reference(module, example, spec, relax_mod, run, args, choice, tracker)
    print(f"  ms_pruner {_us(seconds)}{f' on a server of {tracker}' if tracker else ''} | {line}")
    mismatch = compare_outputs(outputs, expected, spec.dtype, reference)
    write_summary(work_dir, {
        "model": spec.name, "dtype": spec.dtype, "target": str(choice.target), "target_kind": choice.target.kind.name,
        "strategy": args.strategy, "trials": result.trials, "seed": args.seed, "tasks": len(result.tasks),
        "tasks_with_records": len(result.tasks) - untuned,
        "tuning_wall_s": result.rounds[-1]["wall_s"] if result.rounds else 0.0, "latency_s": seconds,
        **baselines, "reference": reference, "outputs_match": mismatch is None, "mismatch": mismatch,
        "rpc": str(tracker) if tracker else None,
    })
    if mismatch:
        print(f"ms-pruner: error: {spec.name}: {mismatch}" + (f"; {args.export} not written" if args.export else ""),
              file=sys.stderr)
        return 1
    print(f"  outputs match {reference} ({len(outputs)} output(s))")
    if args.export:
        export_model(result.executable, choice.target, args.export)
        print(f"  wrote {args.export}" + ("" if tracker else _library_check(args.export, choice, inputs, expected, spec,
                                                                               reference)))
    return 0


def _library_check(path: str, choice, inputs, expected, spec, reference) -> str:
    """The exported model loaded by TVM's runtime here and run once, held against ``reference``
    as the tuned model was: how to run it, or an error when it disagrees."""
    try:
        outputs = run_library(path, choice.target, inputs)
    except RuntimeError as err:  # TVM's FFI raises a failed load or run as RuntimeError
        mismatch = f"it does not run here: {last_line(err, type(err).__name__)[:200]}"
    else:
        mismatch = compare_outputs(outputs, expected, spec.dtype, reference)
    if mismatch:
        os.remove(path)
        raise UserError(f"{path}, loaded again: {mismatch}; removed")
    return (f", loaded again, outputs match {reference}: relax.VirtualMachine(tvm.runtime.load_module('{path}'), "
            f"device)['main'](*inputs)")


def _reference(module, example, spec, relax_mod, run, args, choice, tracker) -> tuple:
    """(what the tuned model is held against, its outputs, the summary's baseline latencies, their
    line): torch eager (and torch.compile) for a torch model, TVM's build with no record for a user's
    Relax module (run as the tuned one is, here or on a server)."""
    if isinstance(module, RelaxModel):
        expected, seconds = default_build(relax_mod, choice.target, run)
        return (DEFAULT_BUILD, expected, {"torch_eager_s": None, "torch_compile_s": None, "default_build_s": seconds},
                f"{DEFAULT_BUILD} (no record) {_us(seconds)}")
    eager, compiled = (None, None) if tracker else _torch_latencies(module, example, spec.dtype, choice, args)
    line = ("torch not timed (it would run here)" if tracker else
            f"torch eager {_us(eager)} | torch.compile {_us(compiled) if args.torch_compile else 'skipped'}")
    return ("torch", _torch_outputs(module, example),
            {"torch_eager_s": eager, "torch_compile_s": compiled, "default_build_s": None}, line)


def _torch_outputs(module, example) -> list:
    """The fp32 torch module's outputs on its example, the tuned model's reference."""
    import torch  # lazy: torch only for the model's eager reference run

    with torch.no_grad():
        expected = module(*example_inputs(example))
    return [t.float().numpy() for t in (expected if isinstance(expected, (tuple, list)) else [expected])]


def _torch_latencies(module, example, dtype: str, choice, args) -> tuple:
    """torch eager's and torch.compile's seconds for the model on this machine's device (None: n/a)."""
    import torch  # lazy: torch only for its own timings

    device = "cuda" if choice.is_cuda else "cpu"
    torch_dtype = getattr(torch, dtype) if device == "cuda" else torch.float32
    timed = module.to(torch_dtype)
    timed_input = tuple(x.to(torch_dtype) if x.is_floating_point() else x for x in example_inputs(example))
    eager = torch_latency(timed, timed_input, device)
    return eager, torch_latency(timed, timed_input, device, compile_model=True) if args.torch_compile else None


def _us(seconds) -> str:
    return f"{microseconds(seconds)} us" if seconds else "n/a"


def _dir_name(model: str) -> str:
    """A model's default work-dir name: ``file:function`` as ``file-function``."""
    return model.replace(":", "-")


def _add_model_table_command(sub) -> None:
    table = sub.add_parser("model-table", help="join tune-model runs (their work dirs) into one Markdown table: "
                                               "each strategy next to torch eager and torch.compile")
    table.add_argument("work_dirs", nargs="+", help="tune-model work dirs (or their tune_model.json)")
    add_out(table)
    table.set_defaults(func=cmd_model_table)


def cmd_model_table(args) -> int:
    write_text(model_table(read_summaries(args.work_dirs)), args.out)
    return 0
