"""Files the package writes whole (a comparison's compare.json, a model's summary, a repaired
database): written to a staging file beside the target and moved over it, so a run killed
mid-write leaves the old file or the new one, never a cut one that the next call cannot read.
The folders they go in are made here too, with one line where a path cannot be one."""

from __future__ import annotations

import json
import os
import threading
from typing import Union

from .errors import UserError


def make_folder(path: str, what: str) -> None:
    """``path`` is a folder afterwards (made with its parents where missing); ``what`` names it in
    the one line that says why it cannot be (a file of that name, a file among its parents)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{what} '{path}' is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot make the {what} '{path}': {err.strerror or err}") from None


def replace_file(path: str, data: Union[str, bytes]) -> None:
    """``path`` holds ``data`` afterwards; until the final rename it holds what it held before. Each
    writer (process and thread) stages in a file of its own, so two writing one path at once do not
    share a staging file."""
    staging = f"{path}.{os.getpid()}.{threading.get_ident()}.writing"
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
