"""The ``ms-pruner`` command line (also ``python -m ms_pruner``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import List, Optional

from .errors import MAX_SEED, UserError, require_positive
from .tuning.interrupt import TimeLimitReached, set_time_limit

DEFAULT_GPU_WORKLOAD = "matmul:4096x4096x4096:float16:float32"
DEFAULT_CPU_WORKLOAD = "matmul:128x128x128:float32:float32"


def _default_work_dir(spec: str, target_kind: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
    return os.path.join("ms_pruner_work", f"{safe}-{target_kind}")


def cmd_tune(args) -> int:
    from .hardware import resolve_target
    from .workloads import parse_workload

    if args.workload is not None:
        parse_workload(args.workload)  # bad specs fail before any device probing
    if args.pretrained:
        from .cost_model import read_model_file

        read_model_file(args.pretrained)  # a bad model file fails before tuning starts
    choice = resolve_target(args.target, args.gpu, require_device=True)
    spec = args.workload or (DEFAULT_GPU_WORKLOAD if choice.is_cuda else DEFAULT_CPU_WORKLOAD)
    workload = parse_workload(spec)
    work_dir = args.work_dir or _default_work_dir(workload.spec, choice.target.kind.name)

    from .tuning import tune_tir
    from .tuning.instrument import continues_batch

    result = tune_tir(
        workload.prim_func(),
        choice.target,
        work_dir,
        args.trials,
        strategy=args.strategy,
        builder=args.builder,
        seed=args.seed,
        num_trials_per_iter=args.per_iter,
        pretrained=args.pretrained,
        progress=not args.no_progress,
        cost_model=args.cost_model,
        space=args.space,
        first_round=args.first_round,
    )
    if args.json:
        print(json.dumps(dict(vars(result), best_tflops=result.best_tflops, workload=workload.spec)))
        return 0
    if result.new_trials == 0:
        print(f"work dir {work_dir} already holds {result.records} records of {workload.spec}; nothing to do")
    if result.best_latency_s is None:
        print(f"{workload.spec}: {result.records} records, none ran successfully (see {work_dir}/logs)")
        return 1
    for timing in result.rounds:
        split = timing.get("strategy") or {}
        detail = "".join(f", {name} {split[name + '_s']:.1f}s" for name in ("sample", "draft", "verify", "droplet")
                         if name + "_s" in split)
        kind = " (follow-up)" if continues_batch(timing) else ""
        print(
            f"round {timing['round']}{kind}: {timing['trials']} trials, search {timing['search_s']:.1f}s{detail}, "
            f"build {timing['build_s']:.1f}s ({timing['build_errors']} errors), run {timing['run_s']:.1f}s "
            f"({timing['run_errors']} errors), model update {timing['update_s']:.1f}s"
        )
    print(
        f"{workload.spec} on {choice.target.kind.name}{'' if result.space == 'none' else ', space ' + result.space}: "
        f"best {result.best_latency_s * 1e6:.2f} us "
        f"({result.best_tflops:.3f} TFLOP/s), {result.records} records ({result.new_trials} new) "
        f"in {work_dir}"
    )
    return 0


def cmd_show(args) -> int:
    from .database.records import describe_best, group_by_workload, open_database

    database = open_database(args.work_dir)
    records = list(database.get_all_tuning_records())
    if not records:
        print(f"{args.work_dir}: no tuning records")
        return 1
    for group in group_by_workload(records).values():
        print(describe_best(group))
    return 0


def cmd_analyze(args) -> int:
    from .evaluation import evaluate_database

    report = evaluate_database(args.db, gpu=args.gpu, ptxas=args.ptxas)
    if args.json:
        print(json.dumps(report.as_json()))
        return 0
    print(f"{'#':>4} {'predicted_us':>13} {'measured_us':>12}  note")
    for index, record in enumerate(report.records):
        predicted = f"{record.predicted_s * 1e6:13.1f}" if record.predicted_s is not None else f"{'invalid':>13}"
        measured = f"{record.measured_s * 1e6:12.1f}" if record.measured_s is not None else f"{'failed':>12}"
        print(f"{index:4d} {predicted} {measured}  {record.reason}")
    print(
        f"spearman {report.spearman:.3f}  recall_top10_in_top30 {report.recall_top10_in_top30:.3f}  "
        f"n_valid {report.n_valid}/{len(report.records)}  {report.us_per_candidate:.0f} us per candidate"
    )
    if report.registers is not None:
        r = report.registers
        print(f"ptxas: {r['kernels']} kernels; spill called by both {r['spill_both']}, "
              f"by neither {r['spill_neither']}, "
              f"by the analyzer only {r['spill_estimate_only']}, by ptxas only {r['spill_ptxas_only']}; "
              f"same blocks per SM {r['same_blocks_per_sm']}; median register error {r['regs_error_median']}")
    return 0


def cmd_remeasure(args) -> int:
    from .hardware import resolve_target
    from .tuning.remeasure import best_records, remeasure, summary

    work_dirs = list(args.db or [])
    if args.compare:
        from .tuning.compare import finished_work_dirs

        work_dirs += finished_work_dirs(args.compare, args.strategy)
    if not work_dirs:
        raise UserError("remeasure needs --db WORK_DIR or --compare OUT_DIR")
    choice = resolve_target(args.target, args.gpu, require_device=True)
    report = {"target": str(choice.target), "work_dirs": {}}
    for work_dir in work_dirs:
        records = best_records(work_dir, choice.target, args.top)
        again = remeasure(records, choice.target, builder=args.builder)
        report["work_dirs"][work_dir] = {"records": [dataclasses.asdict(r) for r in again], "summary": summary(again)}
        if not args.json:
            print(f"{work_dir}: its {len(again)} best records measured again here")
            for entry in again:
                now = f"{entry.measured_s * 1e6:10.1f}" if entry.measured_s else f"{'failed':>10}"
                print(f"  #{entry.rank} recorded {entry.recorded_s * 1e6:10.1f} us  now {now} us"
                      + (f"  x{entry.ratio:.3f}" if entry.ratio else f"  {entry.error}"))
            median = report["work_dirs"][work_dir]["summary"]["median_ratio"]
            print(f"  median now/recorded: {median:.3f}" if median else "  none ran")
    if args.json:
        print(json.dumps(report))
    return 0 if all(w["summary"]["measured"] for w in report["work_dirs"].values()) else 1


def cmd_evaluate_model(args) -> int:
    from .evaluation.model_ranking import evaluate_runs, markdown_table

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = args.seeds or [args.seed]
    if args.by_round:
        return _print_by_round(args.db, models, seeds[0], args.json)
    rows = evaluate_runs(args.db, models, seeds, train_frac=args.train_frac, pretrained=args.pretrained,
                         progress=lambda path: None if args.json else print(f"scored {path}", file=sys.stderr))
    if args.json:
        print(json.dumps({"train_frac": args.train_frac, "seeds": seeds, "models": models, "runs": rows}))
        return 0
    print(f"each run: trained on its first {args.train_frac:.0%} of records in measurement order, the rest "
          f"scored; seeds {', '.join(map(str, seeds))}")
    print(markdown_table(rows, models))
    return 0


def _print_by_round(paths, models, seed: int, as_json: bool) -> int:
    from .evaluation.model_ranking import by_round, by_round_table

    runs = {path: by_round(path, models, seed) for path in paths}
    if as_json:
        print(json.dumps({"seed": seed, "models": models, "runs": runs}))
        return 0
    print("rank of the fastest later record under each model trained on the rounds before (1 = first)")
    print(by_round_table(runs, models))
    return 0


def cmd_train(args) -> int:
    from .cost_model.offline import train_offline

    report = train_offline(args.db, args.out, time_budget_s=args.time_budget, max_epochs=args.epochs,
                           seed=args.seed, residual=args.residual)
    print(f"trained on {report['samples']} records from {len(args.db)} database(s) in {report['seconds']:.1f}s "
          f"({report['epochs']} {'rounds' if args.residual == 'trees' else 'epochs'}); wrote {args.out}")
    return 0


def cmd_compare(args) -> int:
    from .hardware import resolve_target
    from .tuning.compare import comparison_settings, load_previous, run_comparison, write_outputs
    from .workloads import get_suite, parse_workload

    if not args.workload and not args.suite:
        raise UserError("compare needs --workload SPEC (repeatable) or --suite NAME")
    workloads = [parse_workload(w) for w in args.workload] + (get_suite(args.suite) if args.suite else [])
    if args.pretrained:
        from .cost_model import read_model_file

        read_model_file(args.pretrained)
    choice = resolve_target(args.target, args.gpu, require_device=True)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    machine = {"target": str(choice.target), "gpu": choice.gpu.marketing_name if choice.gpu else None,
               "cpu": choice.cpu.name if choice.cpu else None}
    command = "ms-pruner " + " ".join(args.argv)
    settings = comparison_settings(choice, args.trials, args.per_iter, args.seed, args.builder, args.space,
                                   args.first_round)
    previous = {} if args.fresh else load_previous(args.out, settings)
    report = run_comparison(workloads, choice, args.trials, args.per_iter, args.out, seed=args.seed,
                            strategies=strategies, pretrained=args.pretrained, builder=args.builder,
                            progress=not args.no_progress, previous=previous, space=args.space,
                            first_round=args.first_round,
                            on_run=lambda partial: write_outputs(partial, args.out, command, machine))
    for path in write_outputs(report, args.out, command, machine):
        print(f"wrote {path}")
    return 0


def cmd_tune_model(args) -> int:
    from .hardware import resolve_target
    from .models import MODELS, get_model

    if args.model not in MODELS:
        raise UserError(f"unknown model '{args.model}'; known: {', '.join(sorted(MODELS))}")
    if args.pretrained:
        from .cost_model import read_model_file

        read_model_file(args.pretrained)
    choice = resolve_target(args.target, args.gpu, require_device=True)
    module, example, spec = get_model(args.model, dtype=args.dtype)
    work_dir = args.work_dir or os.path.join("ms_pruner_work", f"{args.model}-{choice.target.kind.name}")

    import torch

    from .models import compare_outputs, import_torch_model, run_executable, torch_latency, tune_relax
    from .models.report import write_summary

    with torch.no_grad():
        expected = module(example)
    expected = [t.float().numpy() for t in (expected if isinstance(expected, (tuple, list)) else [expected])]
    relax_mod = import_torch_model(module, example, nhwc=spec.nhwc and choice.is_cuda,
                                   mixed_precision=spec.dtype == "float16")
    result = tune_relax(relax_mod, None,
                        choice.target, work_dir, args.trials, strategy=args.strategy, seed=args.seed,
                        num_trials_per_iter=args.per_iter, pretrained=args.pretrained,
                        progress=not args.no_progress, space=args.space, first_round=args.first_round)
    outputs, seconds = run_executable(result.executable, choice.target, [example.numpy()])
    print(f"{args.model} ({spec.dtype} compute, input {tuple(spec.input_shape)}) on {choice.target.kind.name}: "
          f"{len(result.tasks)} tasks tuned with {args.strategy} ({args.trials} trials) in {work_dir}")
    device = "cuda" if choice.is_cuda else "cpu"
    torch_dtype = getattr(torch, spec.dtype) if device == "cuda" else torch.float32
    timed, timed_input = module.to(torch_dtype), example.to(torch_dtype)
    eager = torch_latency(timed, timed_input, device)
    compiled = torch_latency(timed, timed_input, device, compile_model=True) if args.torch_compile else None
    print(f"  ms_pruner {seconds * 1e6:.1f} us | torch eager "
          f"{f'{eager * 1e6:.1f} us' if eager else 'n/a'} | torch.compile "
          f"{f'{compiled * 1e6:.1f} us' if compiled else ('n/a' if args.torch_compile else 'skipped')}")
    mismatch = compare_outputs([o.astype("float32") for o in outputs], expected, spec.dtype)
    write_summary(work_dir, {
        "model": args.model, "dtype": spec.dtype, "target": str(choice.target), "target_kind": choice.target.kind.name,
        "strategy": args.strategy, "trials": args.trials, "seed": args.seed, "tasks": len(result.tasks),
        "tuning_wall_s": result.rounds[-1]["wall_s"] if result.rounds else 0.0, "latency_s": seconds,
        "torch_eager_s": eager, "torch_compile_s": compiled, "outputs_match": mismatch is None, "mismatch": mismatch,
    })
    if mismatch:
        print(f"ms-pruner: error: {args.model}: {mismatch}", file=sys.stderr)
        return 1
    print(f"  outputs match torch ({len(outputs)} output(s))")
    return 0


def _add_space(parser) -> None:
    from .space import SPACES

    parser.add_argument("--space", default="auto", choices=SPACES,
                        help="tensor-core rule families to search on a GPU: wmma, mma (pipelined mma.sync), "
                             "all (both), auto (all on sm_80+ where the mma rule takes a block, else wmma)")
    parser.add_argument("--no-first-round", dest="first_round", action="store_false",
                        help="Pruner without its tensor-core first-round policy (climb, geometry cap, "
                             "follow-up slices): the ablation")


def _add_time_limit(parser) -> None:
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="stop after the last round that leaves no time for another within SECONDS "
                             "(exit status 124); the work dir keeps every record and rerunning resumes")


def seed_value(text: str) -> int:
    """``--seed``: the random seeds TVM's and numpy's generators take (0 to 2**32 - 1)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED}, got {seed}")
    return seed


def seed_list(text: str) -> list:
    """``--seeds 0,1,2``: several ``--seed`` values."""
    return [seed_value(part.strip()) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ms-pruner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    tune = sub.add_parser("tune", help="tune one workload (a MetaSchedule work dir; reruns resume)")
    tune.add_argument("workload", nargs="?", default=None,
                      help=f"workload spec, e.g. {DEFAULT_GPU_WORKLOAD} (default: that on a GPU, "
                           f"{DEFAULT_CPU_WORKLOAD} on CPU)")
    tune.add_argument("--target", default="auto", help="llvm | cuda | GPU name or TVM tag | auto")
    tune.add_argument("--gpu", default=None, help="GPU spec name (h100, a100, ...); default: detected")
    tune.add_argument("--trials", type=int, default=64, help="total trials in the work dir")
    tune.add_argument("--strategy", default="pruner", help="pruner | moa | stock | replay (random)")
    tune.add_argument("--work-dir", default=None)
    tune.add_argument("--seed", type=seed_value, default=None)
    tune.add_argument("--builder", default="pruner", help="pruner (ours) | stock (MetaSchedule's)")
    tune.add_argument("--per-iter", type=int, default=64, help="trials measured per round")
    tune.add_argument("--pretrained", default=None, help="pretrained PaCM model (ms-pruner train) for MoA")
    tune.add_argument("--cost-model", default=None, help="xgb | pacm, for --strategy stock (default xgb)")
    tune.add_argument("--no-progress", action="store_true")
    _add_space(tune)
    _add_time_limit(tune)
    tune.add_argument("--json", action="store_true", help="print the result as one JSON object")
    tune.set_defaults(func=cmd_tune)

    analyze = sub.add_parser("analyze", help="score the static analyzer against a measured database")
    analyze.add_argument("--db", required=True, help="MetaSchedule JSON database directory")
    analyze.add_argument("--gpu", default=None, help="GPU spec to assume (default: from the record target)")
    analyze.add_argument("--json", action="store_true")
    analyze.add_argument("--ptxas", action="store_true",
                         help="also compile each CUDA record with nvcc and hold the analyzer's registers "
                              "against ptxas's")
    analyze.set_defaults(func=cmd_analyze)

    evaluate = sub.add_parser("evaluate-model", help="train cost models on early records, score later ones")
    evaluate.add_argument("--db", action="append", required=True, help="database directory (repeatable)")
    evaluate.add_argument("--models", default="analyzer,pacm,xgb",
                          help="comma list of analyzer, pacm, pacm-transformer, xgb, xgb-trained")
    evaluate.add_argument("--train-frac", type=float, default=0.5)
    evaluate.add_argument("--seed", type=seed_value, default=0)
    evaluate.add_argument("--pretrained", default=None, help="a 'ms-pruner train' file, for the model 'pretrained'")
    evaluate.add_argument("--by-round", action="store_true",
                          help="at each round boundary of each run's round log, the rank of the fastest later record")
    evaluate.add_argument("--seeds", type=seed_list, default=None, help="comma list of seeds (overrides --seed), e.g. 0,1,2")
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(func=cmd_evaluate_model)

    train = sub.add_parser("train", help="pretrain PaCM offline from MetaSchedule databases")
    train.add_argument("--db", action="append", required=True, help="database directory (repeatable)")
    train.add_argument("--out", required=True, help="model file to write")
    train.add_argument("--epochs", type=int, default=200)
    train.add_argument("--time-budget", type=float, default=300.0, help="seconds")
    train.add_argument("--seed", type=seed_value, default=0)
    train.add_argument("--residual", choices=("transformer", "trees"), default="transformer",
                       help="transformer: for --strategy moa; trees: a warm start for PaCM's gate")
    train.set_defaults(func=cmd_train)

    compare = sub.add_parser("compare", help="stock MetaSchedule vs Pruner (vs MoA), same trials and seed")
    compare.add_argument("--workload", action="append", default=[], help="workload spec (repeatable)")
    compare.add_argument("--suite", default=None, help="named suite (cpu-small, tensorcore-small, ...)")
    compare.add_argument("--target", default="auto")
    compare.add_argument("--gpu", default=None)
    compare.add_argument("--trials", type=int, default=64)
    compare.add_argument("--per-iter", type=int, default=64)
    compare.add_argument("--strategies", default="stock,pruner", help="comma list of stock, pruner, moa")
    compare.add_argument("--pretrained", default=None, help="PaCM model for moa")
    compare.add_argument("--builder", default="pruner")
    compare.add_argument("--seed", type=seed_value, default=0)
    compare.add_argument("--out", required=True, help="directory for compare.json/.md/.png and work dirs")
    compare.add_argument("--no-progress", action="store_true")
    _add_space(compare)
    _add_time_limit(compare)
    compare.add_argument("--fresh", action="store_true",
                         help="ignore runs already in --out/compare.json instead of adding to them")
    compare.set_defaults(func=cmd_compare)

    model = sub.add_parser("tune-model", help="tune a whole torch model through Relax and check it")
    model.add_argument("--model", required=True, help="bert-layer | resnet-block | mlp-tiny")
    model.add_argument("--target", default="auto")
    model.add_argument("--gpu", default=None)
    model.add_argument("--trials", type=int, default=64, help="global trial budget over all tasks")
    model.add_argument("--per-iter", type=int, default=64)
    model.add_argument("--strategy", default="pruner", help="stock | pruner | moa")
    model.add_argument("--pretrained", default=None)
    model.add_argument("--dtype", default=None, help="float16 | float32 (default: the model's)")
    model.add_argument("--work-dir", default=None)
    model.add_argument("--seed", type=seed_value, default=0)
    model.add_argument("--torch-compile", action=argparse.BooleanOptionalAction, default=True,
                       help="also time torch.compile (skipped with --no-torch-compile)")
    model.add_argument("--no-progress", action="store_true")
    _add_space(model)
    _add_time_limit(model)
    model.set_defaults(func=cmd_tune_model)

    again = sub.add_parser("remeasure", help="build and run a work dir's best records again on this machine")
    again.add_argument("--db", action="append", default=None, help="work dir or database directory (repeatable)")
    again.add_argument("--compare", default=None, metavar="OUT_DIR",
                       help="also the finished runs of --strategy in the comparison under OUT_DIR (compare --out)")
    again.add_argument("--strategy", default="stock", help="whose runs --compare takes")
    again.add_argument("--top", type=int, default=4, help="how many of the fastest valid records")
    again.add_argument("--target", default="auto")
    again.add_argument("--gpu", default=None)
    again.add_argument("--builder", default="pruner")
    again.add_argument("--json", action="store_true", help="print the result as one JSON object")
    again.set_defaults(func=cmd_remeasure)

    show = sub.add_parser("show", help="print the best record of each workload in a work dir")
    show.add_argument("--work-dir", required=True)
    show.set_defaults(func=cmd_show)

    from .evaluation.space_report import add_space_command
    from .tuning.check import add_check_command

    add_space_command(sub)
    add_check_command(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        if getattr(args, "time_limit", None) is not None:
            require_positive("--time-limit", args.time_limit)
            set_time_limit(args.time_limit)
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"ms-pruner: error: {err}", file=sys.stderr)
        return 2
    except TimeLimitReached as err:
        print(f"ms-pruner: {err}; records measured so far are kept, rerun the command to resume", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        print("ms-pruner: interrupted; records measured so far are kept in the work dir", file=sys.stderr)
        return 130
    finally:
        set_time_limit(None)


if __name__ == "__main__":
    sys.exit(main())
