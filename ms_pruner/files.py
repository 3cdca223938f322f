"""Files the package writes whole (a comparison's compare.json, a model's summary, a repaired
database): written to a staging file beside the target and moved over it, so a run killed
mid-write leaves the old file or the new one, never a cut one that the next call cannot read."""

from __future__ import annotations

import json
import os
from typing import Union


def replace_file(path: str, data: Union[str, bytes]) -> None:
    """``path`` holds ``data`` afterwards; until the final rename it holds what it held before."""
    staging = f"{path}.{os.getpid()}.writing"
    mode, encoding = ("wb", None) if isinstance(data, bytes) else ("w", "utf-8")
    try:
        with open(staging, mode, encoding=encoding) as handle:
            handle.write(data)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.remove(staging)


def replace_json(path: str, value) -> None:
    """``replace_file`` of ``value`` as indented JSON."""
    replace_file(path, json.dumps(value, indent=1))
