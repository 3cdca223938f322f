"""Join ``tune-model`` runs (their work dirs) into one Markdown table: ours vs stock vs torch.

    python scripts/model_table.py WORK_DIR [WORK_DIR ...] [--out table.md]
"""

import argparse
import sys

from ms_pruner.errors import UserError
from ms_pruner.models.report import model_table, read_summaries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work_dirs", nargs="+")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    try:
        table = model_table(read_summaries(args.work_dirs))
    except UserError as err:
        print(f"model_table: error: {err}", file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
