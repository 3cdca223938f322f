"""The ``ms-pruner`` command line (also ``python -m ms_pruner``): one module a group of commands."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..errors import UserError, require_positive
from ..evaluation.space_report import add_space_command
from ..tuning.check import add_check_command
from ..tuning.export import add_export_command
from ..tuning.fleet import NoServerLeft
from ..tuning.interrupt import TimeLimitReached, set_time_limit
from .database import add_database_commands
from .evaluation import add_evaluation_commands
from .models import add_model_commands
from .tuning import add_tuning_commands

DESCRIPTION = ("Tune TVM MetaSchedule (tensor-core) kernels with Pruner: draft with a static analyzer, verify "
               "with a learned cost model, measure the best; compare against stock MetaSchedule.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ms-pruner", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    add_tuning_commands(sub)
    add_model_commands(sub)
    add_evaluation_commands(sub)
    add_database_commands(sub)
    add_space_command(sub)
    add_check_command(sub)
    add_export_command(sub)
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
    except NoServerLeft as err:
        print(f"ms-pruner: error: {err}", file=sys.stderr)
        return 3
    except TimeLimitReached as err:
        print(f"ms-pruner: {err}; records measured so far are kept, rerun the command to resume", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        print("ms-pruner: interrupted; records measured so far are kept in the work dir", file=sys.stderr)
        return 130
    finally:
        set_time_limit(None)
