"""``tune``, ``compare``, ``restore``, ``remeasure`` and ``show``: tuning workloads and comparisons."""

from __future__ import annotations

import dataclasses
import json
import os
import re

from ..cost_model import read_model_file
from ..database import sole_writer
from ..database.records import describe_best, group_by_workload, record_lines_in_file_order
from ..errors import UserError
from ..hardware import add_target_options, resolve_target
from ..search import parse_settings, warm_start_line
from ..tuning import tune_tir
from ..tuning.compare import (check_strategies, comparison_settings, finished_work_dirs, load_previous, run_comparison,
                              write_outputs)
from ..tuning.fleet import make_fleet_runner, tracker_of
from ..tuning.instrument import continues_batch
from ..tuning.remeasure import best_records, remeasure, summary
from ..tuning.restore import restore_comparison
from ..workloads import get_suite, parse_workload, tuned_workload
from .options import DEFAULT_CPU_WORKLOAD, DEFAULT_GPU_WORKLOAD, add_rpc, add_search_options, add_time_limit, seed_value


def add_tuning_commands(sub) -> None:
    tune = sub.add_parser("tune", help="tune one workload (a MetaSchedule work dir; reruns resume)")
    tune.add_argument("workload", nargs="?", default=None,
                      help=f"workload spec, e.g. {DEFAULT_GPU_WORKLOAD} (default: that on a GPU, "
                           f"{DEFAULT_CPU_WORKLOAD} on CPU), or FILE.py:NAME: your TensorIR, a PrimFunc, an "
                           "IRModule of one, or a function returning one")
    add_target_options(tune)
    tune.add_argument("--trials", type=int, default=64, help="total trials in the work dir")
    tune.add_argument("--strategy", default="pruner", help="pruner | moa | stock | replay (random)")
    tune.add_argument("--work-dir", default=None)
    tune.add_argument("--seed", type=seed_value, default=None)
    tune.add_argument("--builder", default="pruner", help="pruner (ours) | stock (MetaSchedule's)")
    tune.add_argument("--per-iter", type=int, default=64, help="trials measured per round")
    tune.add_argument("--pretrained", default=None, help="pretrained PaCM model (ms-pruner train) for MoA")
    tune.add_argument("--no-progress", action="store_true")
    add_search_options(tune)
    add_rpc(tune)
    add_time_limit(tune)
    tune.add_argument("--json", action="store_true", help="print the result as one JSON object")
    tune.set_defaults(func=cmd_tune)
    _add_comparison_commands(sub)
    again = sub.add_parser("remeasure", help="build and run a work dir's best records again on this machine")
    again.add_argument("--db", "--work-dir", action="append", default=None,
                       help="work dir or database directory (repeatable)")
    again.add_argument("--compare", default=None, metavar="OUT_DIR",
                       help="also the finished runs of --strategy in the comparison under OUT_DIR (compare --out)")
    again.add_argument("--strategy", default="stock", help="whose runs --compare takes")
    again.add_argument("--top", type=int, default=4, help="how many of the fastest valid records")
    add_target_options(again)
    again.add_argument("--builder", default="pruner")
    again.add_argument("--repeat", type=int, default=1,
                       help="run the built kernels this many times in turn, each keeping its median")
    again.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_rpc(again)
    again.set_defaults(func=cmd_remeasure)
    show = sub.add_parser("show", help="print the best record of each workload in a work dir")
    show.add_argument("--work-dir", "--db", required=True)
    show.set_defaults(func=cmd_show)


def _add_comparison_settings(parser) -> None:
    """What runs of one comparison share (compare.comparison_settings)."""
    add_target_options(parser)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--per-iter", type=int, default=64)
    parser.add_argument("--builder", default="pruner")
    parser.add_argument("--seed", type=seed_value, default=0)
    add_search_options(parser)


def _comparison_settings(args, choice) -> dict:
    """The settings ``_add_comparison_settings`` read, as compare.json keeps them."""
    return comparison_settings(choice, args.trials, args.per_iter, args.seed, args.builder, args.space,
                               args.first_round, args.cost_model, args.warm_start, parse_settings(args.pruner_settings))


def _add_comparison_commands(sub) -> None:
    compare = sub.add_parser("compare", help="stock MetaSchedule vs Pruner (vs MoA), same trials and seed")
    compare.add_argument("specs", nargs="*", metavar="WORKLOAD",
                         help="workload specs or FILE.py:NAME (as tune takes them)")
    compare.add_argument("--workload", action="append", default=[], help="workload spec (repeatable)")
    compare.add_argument("--suite", default=None, help="named suite (tensorcore, resnet50-convs, cpu-small)")
    compare.add_argument("--strategies", default="stock,pruner", help="comma list of stock, pruner, moa")
    compare.add_argument("--pretrained", default=None, help="PaCM model for moa")
    compare.add_argument("--out", required=True, help="directory for compare.json/.md/.png and work dirs")
    compare.add_argument("--no-progress", action="store_true")
    _add_comparison_settings(compare)
    add_rpc(compare)
    add_time_limit(compare)
    compare.add_argument("--fresh", action="store_true",
                         help="ignore runs already in --out/compare.json instead of adding to them")
    compare.set_defaults(func=cmd_compare)
    restore = sub.add_parser("restore", help="go on here with a comparison made on another machine "
                                             "(its compare.json and an archive of its work dirs)")
    restore.add_argument("--from", dest="source", required=True,
                         help="a directory holding compare/compare.json and work.tgz (docs/results/<gpu>)")
    restore.add_argument("--out", required=True, help="the compare --out to go on in")
    restore.add_argument("--rerun", action="append", default=[], metavar="SPEC=STRATEGY",
                         help="make this finished run again with the current code (repeatable)")
    _add_comparison_settings(restore)
    restore.set_defaults(func=cmd_restore)


def _default_work_dir(spec: str, target_kind: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
    return os.path.join("ms_pruner_work", f"{safe}-{target_kind}")


def cmd_tune(args) -> int:
    given = tuned_workload(args.workload) if args.workload is not None else None  # before any device probing
    settings = parse_settings(args.pruner_settings)
    if args.pretrained:
        read_model_file(args.pretrained)  # a bad model file fails before tuning starts
    tracker = tracker_of(args)
    choice = resolve_target(args.target, args.gpu, require_device=tracker is None)
    workload = given or parse_workload(DEFAULT_GPU_WORKLOAD if choice.is_cuda else DEFAULT_CPU_WORKLOAD)
    work_dir = args.work_dir or _default_work_dir(workload.spec, choice.target.kind.name)

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
        rpc=tracker,
        warm_start=args.warm_start,
        pruner_settings=settings,
    )
    if args.json:
        print(json.dumps(dict(vars(result), best_tflops=result.best_tflops, workload=workload.spec)))
        return 0 if result.best_latency_s is not None else 1
    if result.new_trials == 0:
        print(f"work dir {work_dir} already holds {result.records} records of {workload.spec}; nothing to do")
    if result.best_latency_s is None:
        failed = {kind: sum(t[kind + "_errors"] for t in result.rounds) for kind in ("build", "run")}
        print(f"{workload.spec}: {result.records} records, none ran successfully (build errors: {failed['build']}, "
              f"run errors: {failed['run']}; MetaSchedule's messages in {work_dir}/logs)")
        return 1
    for timing in result.rounds:
        split = timing.get("strategy") or {}
        detail = "".join(f", {name} {split[name + '_s']:.1f}s" for name in ("sample", "draft", "verify", "droplet")
                         if name + "_s" in split)
        kind = " (follow-up)" if continues_batch(timing) else ""
        print(
            f"round {timing['round']}{kind}: {timing['trials']} trials, search {timing['search_s']:.1f}s{detail}, "
            f"build {timing['build_s']:.1f}s ({timing['build_errors']} errors), run {timing['run_s']:.1f}s "
            f"({timing['run_errors']} errors), model update {timing['update_s']:.1f}s{warm_start_line(timing)}"
        )
    print(
        f"{workload.spec} on {choice.target.kind.name}{'' if result.space == 'none' else ', space ' + result.space}: "
        f"best {result.best_latency_s * 1e6:.2f} us "
        f"({result.best_instruction + ', ' if result.best_instruction else ''}{result.best_tflops:.3f} TFLOP/s), "
        f"{result.records} records ({result.new_trials} new) "
        f"in {work_dir}"
    )
    return 0


def cmd_show(args) -> int:
    records = record_lines_in_file_order(args.work_dir)  # one trace replayed a workload: its best's
    if not records:
        print(f"{args.work_dir}: no tuning records")
        return 1
    for group in group_by_workload(records).values():
        print(describe_best(group))
    return 0


def cmd_remeasure(args) -> int:
    work_dirs = list(args.db or [])
    if args.compare:
        work_dirs += finished_work_dirs(args.compare, args.strategy)
    if not work_dirs:
        raise UserError("remeasure needs --db WORK_DIR or --compare OUT_DIR")
    tracker = tracker_of(args)
    choice = resolve_target(args.target, args.gpu, require_device=tracker is None)
    runner = make_fleet_runner(tracker, choice.target) if tracker else None
    report = {"target": str(choice.target), "rpc": str(tracker) if tracker else None, "work_dirs": {}}
    where = f"on the servers of {tracker}" if tracker else "here"
    for work_dir in work_dirs:
        records = best_records(work_dir, choice.target, args.top)
        again = remeasure(records, choice.target, builder=args.builder, runner=runner, repeats=args.repeat)
        report["work_dirs"][work_dir] = {"records": [dataclasses.asdict(r) for r in again], "summary": summary(again)}
        if not args.json:
            print(f"{work_dir}: its {len(again)} best records measured again {where}")
            for entry in again:
                now = f"{entry.measured_s * 1e6:10.1f}" if entry.measured_s else f"{'failed':>10}"
                print(f"  #{entry.rank} recorded {entry.recorded_s * 1e6:10.1f} us  now {now} us"
                      + (f"  x{entry.ratio:.3f}" if entry.ratio else f"  {entry.error}"))
            median = report["work_dirs"][work_dir]["summary"]["median_ratio"]
            print(f"  median now/recorded: {median:.3f}" if median else "  none ran")
    if args.json:
        print(json.dumps(report))
    return 0 if all(w["summary"]["measured"] for w in report["work_dirs"].values()) else 1


def cmd_compare(args) -> int:
    specs = args.specs + args.workload
    if not specs and not args.suite:
        raise UserError("compare needs WORKLOAD ... (or --workload SPEC, repeatable) or --suite NAME")
    workloads = [tuned_workload(w) for w in specs] + (get_suite(args.suite) if args.suite else [])
    if args.pretrained:
        read_model_file(args.pretrained)
    tracker = tracker_of(args)
    choice = resolve_target(args.target, args.gpu, require_device=tracker is None)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    machine = {"target": str(choice.target), "gpu": choice.gpu.marketing_name if choice.gpu else None,
               "cpu": choice.cpu.name if choice.cpu else None}
    command = "ms-pruner " + " ".join(args.argv)
    settings = _comparison_settings(args, choice)
    check_strategies(strategies, args.pretrained, args.seed, args.first_round, args.cost_model, args.warm_start,
                     settings["pruner_settings"])
    with sole_writer(args.out, "compare", "comparison folder"):  # compare.json; each run's dir is locked too
        previous = {} if args.fresh else load_previous(args.out, settings)
        report = run_comparison(workloads, choice, args.trials, args.per_iter, args.out, seed=args.seed,
                                strategies=strategies, pretrained=args.pretrained, builder=args.builder,
                                progress=not args.no_progress, previous=previous, space=args.space,
                                first_round=args.first_round, cost_model=args.cost_model, rpc=tracker,
                                warm_start=args.warm_start, pruner_settings=settings["pruner_settings"],
                                on_run=lambda partial: write_outputs(partial, args.out, command, machine))
        written = write_outputs(report, args.out, command, machine)
    for path in written:
        print(f"wrote {path}")
    return 0


def cmd_restore(args) -> int:
    """Unpack a comparison where the next ``compare --out`` with the same settings keeps its finished
    runs and resumes the cut one (tuning.restore); the target resolves as ``compare``'s does, so a
    machine with another GPU is refused before anything is unpacked."""
    rerun = []
    for text in args.rerun:
        spec, sep, strategy = text.rpartition("=")
        if not sep or not spec or not strategy:
            raise UserError(f"--rerun takes SPEC=STRATEGY, not '{text}'")
        rerun.append((spec, strategy))
    choice = resolve_target(args.target, args.gpu, require_device=True)
    settings = _comparison_settings(args, choice)
    report = restore_comparison(os.path.join(args.source, "compare", "compare.json"),
                                os.path.join(args.source, "work.tgz"), args.out, settings, rerun)
    for spec, entry in report["workloads"].items():
        finished = ", ".join(sorted(entry.get("runs", {}))) or "none"
        pending = ", ".join(f"{s} from {d}" for s, d in sorted(entry.get("pending", {}).items())) or "none"
        again = ", ".join(sorted(entry.get("superseded", {}))) or "none"
        print(f"restored {spec}: finished {finished}; resumes {pending}; set aside to run again {again}")
    return 0
