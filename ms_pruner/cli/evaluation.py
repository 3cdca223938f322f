"""``analyze``, ``evaluate-model``, ``train`` and ``compare-seeds``: the models and results read again."""

from __future__ import annotations

import json
import sys

from ..cost_model.offline import train_offline
from ..errors import UserError
from ..evaluation import evaluate_database
from ..evaluation.database_report import format_shared_memory
from ..evaluation.family_scores import format_family_scores
from ..evaluation.geometry_table import geometry_table, load_estimates
from ..evaluation.model_ranking import by_round, by_round_table, evaluate_runs, markdown_table
from ..evaluation.seeds import seeds_table
from .options import add_out, seed_list, seed_value, write_text


def add_evaluation_commands(sub) -> None:
    analyze = sub.add_parser("analyze", help="score the static analyzer against a measured database")
    analyze.add_argument("--db", "--work-dir", required=True, help="MetaSchedule JSON database directory")
    analyze.add_argument("--gpu", default=None, help="GPU spec to assume (default: from the record target); "
                         "h100:FIELD=VALUE,... changes its figures")
    analyze.add_argument("--json", action="store_true")
    analyze.add_argument("--ptxas", action="store_true",
                         help="also compile each CUDA record with nvcc and hold the analyzer's registers "
                              "against ptxas's, and its estimates against the SASS's issue floor")
    analyze.set_defaults(func=cmd_analyze)

    geometry = sub.add_parser("geometry", help="a tuned run by kernel geometry and operand fetch widths (Markdown)")
    geometry.add_argument("source", help="a work dir, or the output of 'ms-pruner analyze --db DIR --json' "
                                         "(.json or .json.gz)")
    geometry.add_argument("--gpu", default=None, help="GPU spec to assume for a work dir (default: from the target)")
    geometry.add_argument("--per-round", type=int, default=64, help="records a round measured (default 64)")
    geometry.add_argument("--reference-us", type=float, default=None,
                          help="a latency to reach, e.g. stock's final best: which round first measured it")
    geometry.add_argument("--top", type=int, default=30, help="rows at most (default 30)")
    geometry.add_argument("--by-arrangement", action="store_true",
                          help="one row per fragment arrangement too (how a warp loops its fragments)")
    add_out(geometry)
    geometry.set_defaults(func=cmd_geometry)

    evaluate = sub.add_parser("evaluate-model", help="train cost models on early records, score later ones")
    evaluate.add_argument("--db", "--work-dir", action="append", required=True, help="database directory (repeatable)")
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
    train.add_argument("--db", "--work-dir", action="append", required=True, help="database directory (repeatable)")
    train.add_argument("--out", required=True, help="model file to write")
    train.add_argument("--epochs", type=int, default=200)
    train.add_argument("--time-budget", type=float, default=300.0, help="seconds")
    train.add_argument("--seed", type=seed_value, default=0)
    train.add_argument("--residual", choices=("transformer", "trees"), default="transformer",
                       help="transformer: for --strategy moa; trees: a warm start for PaCM's gate")
    train.set_defaults(func=cmd_train)
    _add_compare_seeds_command(sub)


def cmd_geometry(args) -> int:
    records = load_estimates(args.source, args.gpu)
    if args.by_arrangement and all(r.arrangement is None for r in records):
        raise UserError(f"{args.source} has no fragment arrangements: re-run 'ms-pruner analyze --json' on the run")
    write_text(geometry_table(records, args.per_round, args.reference_us, args.top, args.by_arrangement), args.out)
    return 0


def cmd_analyze(args) -> int:
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
        if r["records_with_sass"]:
            print(f"issue floor (SASS of {r['records_with_sass']} records): spearman {r['spearman_with_issue_floor']:.3f} "
                  f"against {r['spearman']:.3f}, recall_top10_in_top30 {r['recall_top10_in_top30_with_issue_floor']:.3f} "
                  f"against {r['recall_top10_in_top30']:.3f}; {r['lifted_by_issue_floor']} kernels under their floor")
    if report.families is not None:
        print("\n".join(format_family_scores(report.families)))
    if report.shared_memory is not None:
        print(format_shared_memory(report.shared_memory))
    return 0


def cmd_evaluate_model(args) -> int:
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
    runs = {path: by_round(path, models, seed) for path in paths}
    if as_json:
        print(json.dumps({"seed": seed, "models": models, "runs": runs}))
        return 0
    print("rank of the fastest later record under each model trained on the rounds before (1 = first)")
    print(by_round_table(runs, models))
    return 0


def cmd_train(args) -> int:
    report = train_offline(args.db, args.out, time_budget_s=args.time_budget, max_epochs=args.epochs,
                           seed=args.seed, residual=args.residual)
    print(f"trained on {report['samples']} records from {len(args.db)} database(s) in {report['seconds']:.1f}s "
          f"({report['epochs']} {'rounds' if args.residual == 'trees' else 'epochs'}); wrote {args.out}")
    return 0


def _add_compare_seeds_command(sub) -> None:
    seeds = sub.add_parser("compare-seeds", help="join comparisons made with different seeds into one table")
    seeds.add_argument("dirs", nargs="+", help="compare --out directories")
    add_out(seeds)
    seeds.set_defaults(func=cmd_compare_seeds)


def cmd_compare_seeds(args) -> int:
    write_text(seeds_table(args.dirs), args.out)
    return 0
