"""Go on with a comparison that an earlier GPU lending left unfinished.

    python scripts/restore_runs.py --from docs/results/h100 --out /tmp/ms_pruner_gpu/compare --target cuda

``--from`` holds what that lending committed: ``compare/compare.json`` and ``work.tgz`` (its work
dirs, ``work/<workload>/<run>/``). They are unpacked under ``--out`` with the work dirs moved there,
so that the next ``ms-pruner compare --out`` with the same settings keeps the finished runs and
resumes the cut one from its records (``ms_pruner.tuning.restore.restore_comparison``). The target
is resolved as ``compare --target`` resolves it, so a machine with another GPU is refused here,
before any tuning starts. ``--rerun SPEC=STRATEGY`` (repeatable) sets a finished run aside so that
the next ``compare`` makes it again with the current search (``superseded`` in compare.json). Exit 1
with one line when nothing was restored.
"""

import argparse
import os
import sys

from ms_pruner.errors import UserError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--gpu", default=None)
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--per-iter", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--builder", default="pruner")
    parser.add_argument("--space", default="auto", help="as compare --space (a comparison made before the space "
                                                        "choice searched wmma)")
    parser.add_argument("--rerun", action="append", default=[], metavar="SPEC=STRATEGY",
                        help="make this finished run again (repeatable): matmul:4096x4096x4096:float16:float32=pruner")
    args = parser.parse_args()

    from ms_pruner.hardware import resolve_target
    from ms_pruner.tuning.compare import comparison_settings
    from ms_pruner.tuning.restore import restore_comparison

    try:
        rerun = [_workload_and_strategy(text) for text in args.rerun]
        choice = resolve_target(args.target, args.gpu, require_device=True)
        settings = comparison_settings(choice, args.trials, args.per_iter, args.seed, args.builder, args.space)
        report = restore_comparison(os.path.join(args.source, "compare", "compare.json"),
                                    os.path.join(args.source, "work.tgz"), args.out, settings, rerun)
    except UserError as err:
        print(f"restore_runs: nothing restored: {err}", file=sys.stderr)
        return 1
    for spec, entry in report["workloads"].items():
        finished = ", ".join(sorted(entry.get("runs", {}))) or "none"
        pending = ", ".join(f"{s} from {d}" for s, d in sorted(entry.get("pending", {}).items())) or "none"
        again = ", ".join(sorted(entry.get("superseded", {}))) or "none"
        print(f"restored {spec}: finished {finished}; resumes {pending}; set aside to run again {again}")
    return 0


def _workload_and_strategy(text: str):
    spec, sep, strategy = text.rpartition("=")
    if not sep or not spec or not strategy:
        raise UserError(f"--rerun takes SPEC=STRATEGY, not '{text}'")
    return spec, strategy


if __name__ == "__main__":
    sys.exit(main())
