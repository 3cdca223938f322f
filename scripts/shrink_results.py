"""Keep docs/results small enough to travel to a lent GPU beside the TVM bundle.

    python scripts/shrink_results.py [--threshold 20000] [PATH ...]   # default: docs/results

A device call carries the whole working tree plus one half of the GPU bundle (`.gpu-bundle/a`,
55.7 MB on 2026-11-26) under 64 MiB, so every megabyte of committed results is a megabyte less
margin (`scripts/carry_size.py`). This gzips (`gzip -9n`: no name or time in the header, so the
bytes depend only on the content) every JSON file over the threshold, except the files other
scripts read back (`compare.json`, `calibrate.json`), and redraws every PNG with a palette of
256 colours (`ms_pruner.tuning.compare.palette_png`, as compare's plots are now saved). Both are
idempotent: a `.json.gz` or a palette PNG is left alone.
"""

import argparse
import gzip
import os
import subprocess
import sys

from ms_pruner.tuning.compare import palette_png

READ_BACK = ("compare.json", "calibrate.json")


def gzip_json(path: str) -> int:
    """``path`` as ``path.gz`` (removed after); the bytes saved."""
    before = os.path.getsize(path)
    with open(path, "rb") as source, open(path + ".gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as packed:
            packed.write(source.read())
    os.remove(path)
    return before - os.path.getsize(path + ".gz")


def tracked(paths) -> list:
    listed = subprocess.run(["git", "ls-files", "-z", "--", *paths], capture_output=True, check=True).stdout
    return [p for p in listed.decode().split("\0") if p and os.path.exists(p)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["docs/results"])
    parser.add_argument("--threshold", type=int, default=20000, help="bytes above which a JSON file is gzipped")
    args = parser.parse_args()
    saved = 0
    for path in tracked(args.paths):
        if path.endswith(".json") and os.path.basename(path) not in READ_BACK \
                and os.path.getsize(path) > args.threshold:
            gained = gzip_json(path)
        elif path.endswith(".png"):
            gained = palette_png(path)
        else:
            continue
        if gained:
            saved += gained
            print(f"{path}: {gained} bytes less")
    print(f"{saved} bytes saved", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
