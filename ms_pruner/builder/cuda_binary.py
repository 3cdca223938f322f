"""Ship compiled CUDA (cubin) inside a build artifact instead of CUDA source.

TVM 0.27's CUDA codegen, in a process without TVM's CUDA runtime (no GPU driver), leaves the
device module as source (format ``cuda``); the *runner* would compile it when it loads the module,
serialised inside the single GPU runner process. We compile in the (parallel) builder instead and
rewrite the serialised device module so its format is ``cubin`` and its payload the binary; the
CUDA runtime then only calls ``cuModuleLoadData``. (With the runtime loaded, codegen compiles by
itself and this rewrite is not needed: ``cuda_compile``.)

Serialised layout (dmlc streams, little endian, strings are u64 length + bytes): the packed import
blob starts with a u64 payload size; a CUDA module inside it is the kind string ``cuda``, a u64
size, then ``fmt`` (string), the function table, and ``data`` (string) last. Only ``fmt`` and
``data`` are rewritten, so the function table is kept byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import tarfile
from typing import Dict, Iterator, List, Tuple

import tvm_ffi
from tvm.runtime import _ffi_api

from .cuda_compile import compile_with_nvcc

_U64 = struct.Struct("<Q")


def _string(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value


def compile_cuda_to_cubin(source: str, target) -> bytes:
    """Compile CUDA C source for ``target.arch`` with nvcc (TVM's own nvcc flags)."""
    with target:
        return compile_with_nvcc(source)


@dataclasses.dataclass
class ImportBlob:
    """The packed import tree of an exported library: tree arrays plus (kind, payload) modules."""

    row_ptr: List[int]
    child_indices: List[int]
    modules: List[Tuple[str, bytes]]  # payload is b"" for the host placeholder "_lib"

    @classmethod
    def parse(cls, blob: bytes) -> "ImportBlob":
        reader = _Reader(blob)
        total = reader.u64()
        if total != len(blob) - _U64.size:
            raise ValueError("unexpected import blob header")
        row_ptr = [reader.u64() for _ in range(reader.u64())]
        child_indices = [reader.u64() for _ in range(reader.u64())]
        modules = []
        for _ in range(max(len(row_ptr) - 1, 0)):
            kind = reader.string().decode()
            modules.append((kind, b"" if kind == "_lib" else reader.string()))
        if reader.pos != len(blob):
            raise ValueError("trailing bytes after the packed modules")
        return cls(row_ptr, child_indices, modules)

    def serialize(self) -> bytes:
        body = _U64.pack(len(self.row_ptr)) + b"".join(_U64.pack(x) for x in self.row_ptr)
        body += _U64.pack(len(self.child_indices)) + b"".join(_U64.pack(x) for x in self.child_indices)
        for kind, payload in self.modules:
            body += _string(kind.encode()) + (b"" if kind == "_lib" else _string(payload))
        return _U64.pack(len(body)) + body


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def u64(self) -> int:
        (value,) = _U64.unpack_from(self.data, self.pos)
        self.pos += _U64.size
        return value

    def string(self) -> bytes:
        size = self.u64()
        if self.pos + size > len(self.data):
            raise ValueError("string runs past the end of the blob")
        value = self.data[self.pos : self.pos + size]
        self.pos += size
        return value


def cuda_module_format(payload: bytes) -> str:
    return _Reader(payload).string().decode()


def replace_cuda_sources(blob: bytes, binaries: Dict[str, bytes], fmt: str = "cubin") -> bytes:
    """Rewrite each serialised ``cuda`` module whose source is a key of ``binaries``.

    Raises ValueError when a source is not found, so a layout change in TVM fails loudly in the
    builder rather than producing an artifact the runner cannot load.
    """
    parsed = ImportBlob.parse(blob)
    pending = dict(binaries)
    for index, (kind, payload) in enumerate(parsed.modules):
        if kind != "cuda" or cuda_module_format(payload) != "cuda":
            continue
        reader = _Reader(payload)
        reader.string()
        function_table_start = reader.pos
        for source in list(pending):
            tail = _string(source.encode("utf-8"))
            if payload.endswith(tail):
                function_table = payload[function_table_start : len(payload) - len(tail)]
                new_payload = _string(fmt.encode()) + function_table + _string(pending.pop(source))
                parsed.modules[index] = (kind, new_payload)
                break
    if pending:
        raise ValueError("CUDA source not found in the packed device modules")
    return parsed.serialize()


def make_fpack_imports(binaries: Dict[str, bytes]):
    """An ``fpack_imports`` for ``export_library`` that packs the imports with binaries in place."""

    def fpack_imports(module, is_system_lib, symbol_prefix, workspace_dir):
        blob = bytes(_ffi_api.ModulePackImportsToTensor(module).numpy())
        blob = replace_cuda_sources(blob, binaries)
        llvm_target = _host_llvm_target(module)
        codegen_blob = tvm_ffi.get_global_func("codegen.codegen_blob")
        packed = codegen_blob(blob, is_system_lib, llvm_target, symbol_prefix)
        path = os.path.join(workspace_dir, f"{symbol_prefix}devc.o")
        packed.write_to_file(path)
        return path

    return fpack_imports


def import_tree(module) -> Iterator:
    """``module`` and every module it imports, depth first (a Relax VM executable's root imports
    the host module, which imports the device modules)."""
    yield module
    for child in module.imports:
        yield from import_tree(child)


def _host_llvm_target(module) -> str:
    """The LLVM target of the host code: the root module's for a TIR executable, the first LLVM
    module's below the root of a Relax VM executable."""
    host = next((m for m in import_tree(module) if m.kind == "llvm"), None)
    if host is None:
        raise ValueError(f"no LLVM host module under the {module.kind} module")
    return host.get_function("_get_target_string")()


def packed_device_code(artifact_path: str) -> bytes:
    """The ``devc.o`` of an exported tar artifact: the object file holding its packed import blob."""
    with tarfile.open(artifact_path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("devc.o"))
        return tar.extractfile(member).read()


def device_module_formats(artifact_path: str) -> List[str]:
    """Formats of the CUDA modules packed in an exported tar artifact ('cuda' means source).

    Reads the blob back from the artifact's ``devc.o`` without loading it, so it works without a GPU.
    """
    data = packed_device_code(artifact_path)
    host_marker = data.find(_string(b"_lib"))
    for start in range(max(host_marker, 0)):  # the blob starts shortly before its "_lib" entry
        (total,) = _U64.unpack_from(data, start)
        if total > len(data) - start - _U64.size:
            continue
        try:
            parsed = ImportBlob.parse(data[start : start + _U64.size + total])
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
        return [cuda_module_format(payload) for kind, payload in parsed.modules if kind == "cuda"]
    raise ValueError(f"no packed import blob in {artifact_path}")
