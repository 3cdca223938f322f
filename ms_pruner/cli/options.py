"""Options shared by the ``ms-pruner`` commands."""

from __future__ import annotations

import argparse
import sys

from ..errors import MAX_SEED
from ..space import SPACES
from ..tuning.fleet import add_rpc_option

DEFAULT_GPU_WORKLOAD = "matmul:4096x4096x4096:float16:float32"
DEFAULT_CPU_WORKLOAD = "matmul:128x128x128:float32:float32"


def add_search_options(parser) -> None:
    """``--space``, ``--cost-model``, ``--no-first-round`` and ``--set``: what a tuning command searches with."""
    parser.add_argument("--space", default="auto", choices=SPACES,
                        help="tensor-core rule families to search on a GPU: wmma, mma (pipelined mma.sync), "
                             "all (both), auto (all on sm_80+ where the mma rule takes a block, else wmma)")
    parser.add_argument("--cost-model", default=None, choices=("xgb", "pacm", "analyzer"),
                        help="what scores candidates: default XGB for stock, PaCM for pruner/moa; analyzer: the "
                             "static analyzer alone, never learning (the verify ablation; compare applies it to "
                             "Pruner's runs)")
    parser.add_argument("--warm-start", nargs="+", default=[], metavar="DB",
                        help="work dirs of other workloads: their best records of this operator kind, adapted "
                             "to its shapes, lead Pruner's first round (docs/search.md)")
    parser.add_argument("--no-first-round", dest="first_round", action="store_false",
                        help="Pruner without its tensor-core first-round policy (climb, geometry cap, "
                             "follow-up slices): the ablation")
    parser.add_argument("--set", dest="pruner_settings", action="append", default=[], metavar="NAME=VALUE",
                        help="a PrunerSearch setting, a field of PrunerConfig or FirstRoundConfig (repeatable; "
                             "docs/search.md), e.g. --set cold_climb_starts=0 to ablate the cold climb")


def add_rpc(parser) -> None:
    add_rpc_option(parser, "measure on the servers a TVM RPC tracker holds for KEY (candidates are built here)")


def add_time_limit(parser) -> None:
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


def add_out(parser, what: str = "the Markdown") -> None:
    parser.add_argument("--out", default=None, help=f"write {what} here instead of stdout")


def write_text(text: str, out=None) -> None:
    """A report to ``out`` (a path) when given, else to stdout."""
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
