"""Cubins a tuning run's processes share: what the search compiled, the builder's workers do not compile again.

A cold round compiles its favourite geometry's tied members with nvcc to read ptxas's registers
(search/first_round/ptxas_ties.py), in the tuning process, and then measures most of them: the
builder's worker processes lowered them to the same source and ran the same nvcc command again,
~1-5 s a tensor-core candidate. ptxas.py remembers its compiles within one process only. While
``MS_PRUNER_CUBIN_CACHE`` names a folder, every compile ptxas.py makes also leaves its cubin and
ptxas's report there under a hash of the nvcc (its path and modification time), the command and
the source, and a compile of that source for that arch, in any process, takes them from there.

A tuning call holds one folder for its run (``run_cubin_cache``) and removes it at the end, so no
run gains from another's compiles (a comparison's stock run from Pruner's). A folder the user
names there is kept and used as it is; ``MS_PRUNER_CUBIN_CACHE=0`` turns sharing off (the ablation).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
from typing import Optional, Tuple

from ..files import replace_file

CUBIN_CACHE_ENV = "MS_PRUNER_CUBIN_CACHE"
OFF = "0"


def cache_folder() -> Optional[str]:
    """The folder this process shares its compiles through, or None (unset or ``0``)."""
    folder = os.environ.get(CUBIN_CACHE_ENV, "")
    return folder if folder not in ("", OFF) else None


@functools.lru_cache(maxsize=None)
def _nvcc_identity() -> str:
    """Which nvcc compiles: a folder the user keeps across runs must not hand one nvcc's cubin to another."""
    path = shutil.which("nvcc")
    if path is None:
        return ""
    real = os.path.realpath(path)
    return f"{real}:{os.stat(real).st_mtime_ns}"


def _paths(folder: str, key: tuple) -> Tuple[str, str]:
    digest = hashlib.sha256(repr((_nvcc_identity(), key)).encode()).hexdigest()
    stem = os.path.join(folder, digest)
    return stem + ".cubin", stem + ".ptxas"


def stored_compile(key: tuple) -> Optional[Tuple[bytes, str]]:
    """(cubin, ptxas's report text) of a compile ``key`` (command and source) left in the folder, else None."""
    folder = cache_folder()
    if folder is None:
        return None
    cubin_path, report_path = _paths(folder, key)
    try:
        with open(report_path, encoding="utf-8") as handle:
            report = handle.read()
        with open(cubin_path, "rb") as handle:
            return handle.read(), report
    except OSError:
        return None


def store_compile(key: tuple, cubin: bytes, report: str) -> None:
    """Leave a compile in the folder (when one is set), each file whole (``files.replace_file``), the
    report last, so a reader that finds the report finds the whole cubin; one that cannot be written
    is left out (a later compile of that source runs nvcc)."""
    folder = cache_folder()
    if folder is None:
        return
    with contextlib.suppress(OSError):
        for path, data in zip(_paths(folder, key), (cubin, report)):
            replace_file(path, data)


@contextlib.contextmanager
def run_cubin_cache():
    """One tuning run's shared folder (yields it, or None when sharing is off): made and named in the
    environment (a builder made inside passes it to its workers), removed with its cubins at the end.
    A folder (or ``0``) the environment already names is left as it is."""
    if CUBIN_CACHE_ENV in os.environ:
        yield cache_folder()
        return
    folder = tempfile.mkdtemp(prefix="ms_pruner_cubins_")
    os.environ[CUBIN_CACHE_ENV] = folder
    try:
        yield folder
    finally:
        os.environ.pop(CUBIN_CACHE_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)
