"""ptxas's report of a CUDA source: registers per thread, spills, stack and static shared memory of
each kernel, from a compile as TVM's (``tvm.support.nvcc``'s command: ``-O3``, ``--use_fast_math``,
ptxas ``-v`` and ``--register-usage-level``), run here because TVM discards that report. It imports
nothing of the lowering path, so a fix to the generated source (parity_unroll.py) can compile.

The last few compiles are remembered (``recent_cubin``): the parity unroll compiles a source to
read ptxas's report and code generation then compiles the same source again, ~1-5 s of nvcc a
candidate; with the command TVM's, the cubin is the one TVM's compile would give. A tuning run's
other processes find them too, in its shared folder (cubin_cache.py).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import tempfile
import threading
from typing import List, Optional, Tuple

import tvm
from tvm.support import nvcc

from .cubin_cache import store_compile, stored_compile

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
# Flags of TVM's command that code for sm_XX does not read differently, kept so the cubin is TVM's.
_TVM_UNDEFINES = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                  "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                  "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__"]
# TVM's command changes under these (debug output, line info): a compile then is not TVM's.
_TVM_DEBUG_ENV = ("TVM_KERNEL_DUMP", "TVM_KERNEL_DEBUG")
RECENT_COMPILES = 4


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """ptxas's report for one entry function."""

    name: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    static_smem_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def parse_ptxas_report(text: str) -> List[KernelResources]:
    """The entry functions of a ``ptxas -v`` report, in the order ptxas compiled them.

    Device functions ptxas reports without "Compiling entry function" are not kernels and are
    skipped; an entry whose report lacks the register line is an error (a truncated report).
    """
    kernels: List[KernelResources] = []
    name = None
    frame = (0, 0, 0)
    for line in text.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            name, frame = entry.group(1), (0, 0, 0)
            continue
        if name is None:
            continue
        spill = _FRAME.search(line)
        if spill:
            frame = tuple(int(g) for g in spill.groups())
            continue
        used = _USED.search(line)
        if used:
            smem = _SMEM.search(line)
            kernels.append(KernelResources(name, int(used.group(1)), *frame,
                                           static_smem_bytes=int(smem.group(1)) if smem else 0))
            name = None
    if name is not None:
        raise ValueError(f"ptxas report for '{name}' has no register count")
    return kernels


def sm_arch(target=None) -> str:
    """``target``'s arch (``Target.current()``'s without one) where it names an SM (``sm_90a``), else ""."""
    target = target or tvm.target.Target.current(allow_none=True)
    arch = str(target.attrs.get("arch", "")) if target is not None else ""
    return arch if arch.startswith("sm_") else ""


def _nvcc_command(arch: str, source_path: str, output_path: str) -> List[str]:
    """TVM 0.27's nvcc command for a cubin (``tvm.support.nvcc._compile_cuda_nvcc``), ptxas ``-v`` on."""
    ptxas_flags = getattr(nvcc, "_ptxas_option_flags", lambda: ["-v"])()
    if "-v" not in ptxas_flags:
        ptxas_flags = ["-v", *ptxas_flags]
    suffix = arch.replace("sm_", "")
    fast_math = [] if os.environ.get("TVM_CUDA_NVCC_NO_FAST_MATH") else ["--use_fast_math"]
    return ["nvcc", "--cubin", "-O3", "-gencode", f"arch=compute_{suffix},code=sm_{suffix}",
            *_TVM_UNDEFINES, "--expt-relaxed-constexpr", "--expt-extended-lambda",
            *fast_math, f"--ptxas-options={','.join(ptxas_flags)}", "-o", output_path, source_path]


class _RecentCompiles:
    """The last ``RECENT_COMPILES`` compiles of this process, by command and source."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries = collections.OrderedDict()

    def get(self, key) -> Optional[Tuple[bytes, List[KernelResources]]]:
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
            return found

    def put(self, key, compiled: Tuple[bytes, List[KernelResources]]) -> None:
        with self.lock:
            self.entries[key] = compiled
            while len(self.entries) > RECENT_COMPILES:
                self.entries.popitem(last=False)


_RECENT = _RecentCompiles()


def _compile_key(source: str, arch: str) -> tuple:
    return tuple(_nvcc_command(arch, "", "")), source


def recent_cubin(source: str, arch: str) -> Optional[bytes]:
    """The cubin of ``source`` for ``arch`` if this process compiled it lately with the command TVM's
    nvcc compile would run now, else None."""
    if any(os.environ.get(name) for name in _TVM_DEBUG_ENV):
        return None
    found = _remembered(_compile_key(source, arch))
    return found[0] if found else None


def _remembered(key: tuple) -> Optional[Tuple[bytes, List[KernelResources]]]:
    """A compile this process made lately, or one the run's shared folder holds."""
    found = _RECENT.get(key)
    if found is None:
        stored = stored_compile(key)
        if stored is not None:
            found = stored[0], parse_ptxas_report(stored[1])
            _RECENT.put(key, found)
    return found


def cuda_source_compile(source: str, arch: str) -> Tuple[bytes, List[KernelResources]]:
    """Compile CUDA source for ``arch`` (``sm_90``) as TVM does: the cubin and ptxas's report."""
    key = _compile_key(source, arch)
    found = _remembered(key)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="ms_pruner_ptxas_") as tmp:
        source_path, cubin_path = os.path.join(tmp, "kernels.cu"), os.path.join(tmp, "kernels.cubin")
        with open(source_path, "w") as f:
            f.write(source)
        proc = subprocess.run(_nvcc_command(arch, source_path, cubin_path), capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"nvcc failed for {arch}: {last[0]}")
        with open(cubin_path, "rb") as f:
            cubin = f.read()
    report = proc.stdout + proc.stderr
    compiled = cubin, parse_ptxas_report(report)
    _RECENT.put(key, compiled)
    store_compile(key, cubin, report)
    return compiled


def cuda_source_resources(source: str, arch: str) -> List[KernelResources]:
    """Compile CUDA source for ``arch`` (``sm_90``) as TVM does and read ptxas's report."""
    return cuda_source_compile(source, arch)[1]
