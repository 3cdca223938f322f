"""Whether a device call with these carried paths stays under the device tool's 64 MiB.

    python scripts/carry_size.py .gpu-bundle/a        # before call 1 of a lending; then .gpu-bundle/b

What travels on each `run` call is the working tree as git sees it (tracked files and untracked
files that are not ignored), `shared/` where the checkout has one, and the carried paths. A call
over the limit is refused, which in a lending costs a round trip of its 15 minutes; this says so
here, for free. Exit status 1 and one line naming the sizes when over.
"""

import argparse
import os
import subprocess
import sys
from typing import Iterable

LIMIT_BYTES = 64 * 2 ** 20
# .gpu-bundle/a, the larger half of ../shared/gpu-bundle/make-bundle.sh's output, on 2026-11-26.
BUNDLE_HALF_BYTES = 55_685_777


def _tree_bytes(path: str) -> int:
    if os.path.isfile(path) or os.path.islink(path):
        return os.lstat(path).st_size
    return sum(os.lstat(os.path.join(folder, name)).st_size
               for folder, _, names in os.walk(path) for name in names)


def working_tree_bytes(root: str = ".", untracked: bool = True) -> int:
    """Bytes of the files git tracks under ``root``, and of those it would add (untracked, not
    ignored) when ``untracked``."""
    others = ["--others", "--exclude-standard"] if untracked else []
    listed = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", *others],
                            capture_output=True, check=True).stdout.decode()
    paths = {os.path.join(root, p) for p in listed.split("\0") if p}
    return sum(os.lstat(p).st_size for p in paths if os.path.lexists(p))


def travelling_bytes(root: str, carry: Iterable[str]) -> int:
    extra = [os.path.join(root, "shared")] if os.path.isdir(os.path.join(root, "shared")) else []
    return working_tree_bytes(root) + sum(_tree_bytes(os.path.join(root, p)) for p in list(carry) + extra)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("carry", nargs="*", help="paths the call carries, relative to the repository root")
    parser.add_argument("--root", default=".")
    args = parser.parse_args()
    missing = [p for p in args.carry if not os.path.exists(os.path.join(args.root, p))]
    if missing:
        print(f"carry_size: not here: {', '.join(missing)} (bash ../shared/gpu-bundle/make-bundle.sh makes the bundle)")
        return 1
    tree = working_tree_bytes(args.root)
    total = travelling_bytes(args.root, args.carry)
    verdict = "fits" if total <= LIMIT_BYTES else "TOO LARGE"
    print(f"carry_size: {verdict}: {total / 2 ** 20:.2f} MiB of {LIMIT_BYTES / 2 ** 20:.0f} "
          f"(working tree {tree / 2 ** 20:.2f} MiB, carried {(total - tree) / 2 ** 20:.2f} MiB)")
    return 0 if total <= LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
