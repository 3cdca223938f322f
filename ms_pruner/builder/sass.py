"""Read a compiled kernel's SASS (``cuobjdump -sass``): which instructions the hardware runs.

A candidate's TIR names the intrinsics it asks for; the SASS says what nvcc made of them: HMMA
(tensor-core MMAs), LDSM (ldmatrix), LDGSTS (cp.async, global to shared without registers), plain
LDG/STS where a copy stayed synchronous, LDL/STL where registers spilled. ``cuobjdump`` needs
``nvdisasm`` beside it; both come from PyPI (``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``,
which the README's install brings) or a CUDA toolkit on PATH. No GPU is needed.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional, Tuple

_SASS_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
COUNTED = ("HMMA", "LDSM", "LDGSTS", "LDGDEPBAR", "LDG", "STG", "LDS", "STS", "LDL", "STL", "BAR")


def cuda_bin_dir() -> Optional[str]:
    """The folder that holds ``cuobjdump`` and ``nvdisasm``: PATH's, else the NVIDIA wheels', else None."""
    found = shutil.which("cuobjdump")
    if found and shutil.which("nvdisasm"):
        return os.path.dirname(found)
    try:
        import nvidia  # noqa: F401  lazy: an optional PyPI package, probed for its bin folders
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for tool in sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))):
            folder = os.path.dirname(tool)
            if os.path.exists(os.path.join(folder, "nvdisasm")):
                return folder
    return None


def read_sass(cubin: bytes, cuda_bin: Optional[str] = None) -> str:
    """The ``cuobjdump -sass`` listing of a cubin; a RuntimeError naming what is missing."""
    folder = cuda_bin or cuda_bin_dir()
    if folder is None:
        raise RuntimeError("cuobjdump and nvdisasm not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = dict(os.environ, PATH=os.pathsep.join([folder, os.environ.get("PATH", "")]))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([os.path.join(folder, "cuobjdump"), "-sass", f.name], capture_output=True,
                              text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {(proc.stderr or proc.stdout).strip()[-200:]}")
    return proc.stdout


def instructions(listing: str) -> List[Tuple[int, str, str]]:
    """(address, opcode, operands) of each instruction line of a ``cuobjdump -sass`` listing."""
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(_SASS_LINE.match, listing.splitlines()) if m]


def opcodes(listing: str) -> List[str]:
    """Each instruction's opcode (``HMMA.1688.F32``) in a ``cuobjdump -sass`` listing, in order."""
    return [opcode for _, opcode, _ in instructions(listing)]


def opcode_counts(listing: str) -> Dict[str, int]:
    """Instructions of each family in ``COUNTED`` (the opcode before its first dot), every family listed."""
    counts = collections.Counter(op.split(".")[0] for op in opcodes(listing))
    return {name: int(counts.get(name, 0)) for name in COUNTED}


def tensor_kernel_counts(listing: str) -> Dict[str, int]:
    """``opcode_counts`` over the kernels of a listing that issue HMMA (a GEMM's, not a separate
    epilogue kernel beside it): their global loads (LDG) are copies that did not become cp.async,
    and the inputs of an epilogue fused into the GEMM (a bias: builder/fused_epilogue.py)."""
    kernels = re.split(r"^\s*Function : .*$", listing, flags=re.MULTILINE)[1:]
    counts: Dict[str, int] = collections.Counter()
    for kernel in kernels:
        found = opcode_counts(kernel)
        if found["HMMA"]:
            counts.update(found)
    return {name: int(counts.get(name, 0)) for name in COUNTED}
