"""A name defined in a user's own Python file (``FILE.py:NAME``): a torch model's builder for
``tune-model``, a TensorIR kernel for ``tune``. Whatever goes wrong in the user's file is one line
naming the option, the file and the error."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from typing import Optional

from .errors import UserError, raised_by_user_code


@dataclasses.dataclass(frozen=True)
class FileName:
    """``path/to/file.py:NAME`` taken apart."""

    path: str
    name: str

    @property
    def label(self) -> str:
        """In reports and work dirs: ``file:NAME``."""
        return f"{os.path.basename(self.path)[:-3]}:{self.name}"


def file_name(text: str) -> Optional[FileName]:
    """``text`` as a FileName, or None where it names no file's name (a named model or workload)."""
    path, _, name = text.rpartition(":")
    return FileName(path, name) if path.endswith(".py") and name else None


def load_name(named: FileName, option: str):
    """The object ``named.name`` of the file ``named.path`` (imported as a module of its own, as
    ``import`` would: registered in ``sys.modules``), None where the file defines no such name."""
    if not os.path.isfile(named.path):
        raise UserError(f"{option} {named.path}:{named.name}: no file '{named.path}'")
    loader = importlib.util.spec_from_file_location(f"ms_pruner_user_file_{abs(hash(named.path))}", named.path)
    source = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = source  # TVMScript's @I.ir_module reads its class's source through it
    try:
        loader.loader.exec_module(source)
    except Exception as err:  # pylint: disable=broad-except  # the user's file: its error, one line
        raise UserError(f"{option} {named.path}:{named.name}: importing '{named.path}' failed: "
                        f"{raised_by_user_code(err)}") from err
    return getattr(source, named.name, None)
