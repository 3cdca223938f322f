"""Memory of an emulated launch: bytes in slots (one a launch, block, warp or thread) and pointers.

Every thread of the emulated blocks runs in one numpy array (``Threads``); a buffer is one byte
array holding a slot per owner (the launch's global memory, each block's shared memory, each warp's
WMMA fragments, each thread's registers), and a pointer is the slot each thread sees and a byte
offset into it. An access outside its slot is a fault of the kernel, reported as such
(``EmulationFault``) rather than read from a neighbouring block.
"""

from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np

NUMPY_TYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8,
               "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
               "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}
WARP = 32
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

Value = Union[int, float, bool, np.ndarray, np.generic]


class EmulationFault(Exception):
    """What the emulated kernel did that a correct kernel does not (an access out of its buffer)."""


class EmulationUnsupported(Exception):
    """A construct the emulator does not model; the kernel is neither right nor wrong by it."""


def split_dtype(dtype: str):
    """(numpy element type, lanes) of TVM dtype ``dtype``: ``float16x8`` -> (float16, 8)."""
    head, sep, lanes = str(dtype).rpartition("x")
    base, count = (head, int(lanes)) if sep and lanes.isdigit() and head in NUMPY_TYPES else (str(dtype), 1)
    if base not in NUMPY_TYPES:
        raise EmulationUnsupported(f"dtype {dtype}")
    return NUMPY_TYPES[base], count


@dataclasses.dataclass
class Threads:
    """The emulated threads: ``count`` of them, ``per_block`` a block, blocks in launch order.

    A thread-varying value is an array of shape (count, lanes); ``index``, ``block`` and ``warp`` are
    each thread's position, its block's slot and its warp's slot among the emulated ones."""

    count: int
    per_block: int

    def __post_init__(self):
        every = np.arange(self.count, dtype=np.int64)[:, None]
        self.index = every
        self.block = every // self.per_block
        self.warp = every // WARP
        self.lane = every % WARP

    @property
    def blocks(self) -> int:
        return self.count // self.per_block

    @property
    def warps(self) -> int:
        return self.count // WARP


class Memory:
    """``slots`` slots of ``slot_bytes`` bytes; unwritten floats read as NaN where ``poison``."""

    def __init__(self, name: str, slots: int, slot_bytes: int, poison: bool = False, data: np.ndarray = None):
        self.name = name
        self.slots = slots
        self.slot_bytes = int(slot_bytes)
        self.bytes = data if data is not None else np.zeros(_padded(slots * self.slot_bytes), dtype=np.uint8)
        if poison and data is None:
            self.bytes[:] = 0xFF  # every float NaN
        self.written = None  # bytes stores have written, where ``track_writes`` asked for them

    def track_writes(self) -> "Memory":
        self.written = np.zeros_like(self.bytes)
        return self

    def written_elements(self, dtype, count: int) -> np.ndarray:
        """Which of the first ``count`` ``dtype`` elements a store wrote (all their bytes)."""
        size = np.dtype(dtype).itemsize
        return self.written[:count * size].reshape(count, size).all(axis=1)

    @classmethod
    def holding(cls, name: str, array: np.ndarray) -> "Memory":
        flat = np.ascontiguousarray(array).reshape(-1)
        raw = np.zeros(_padded(flat.nbytes), dtype=np.uint8)
        raw[:flat.nbytes] = flat.view(np.uint8)
        return cls(name, 1, flat.nbytes, data=raw)

    def array(self, dtype, shape) -> np.ndarray:
        count = int(np.prod(shape))
        return self.bytes[:count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)

    def addresses(self, slot, offset, itemsize: int, mask=None) -> np.ndarray:
        """Element indices (of ``itemsize`` bytes) into ``bytes`` for byte ``offset`` of ``slot``;
        raises EmulationFault where an active thread's access leaves its slot."""
        offset = np.asarray(offset, dtype=np.int64)
        inside = (offset >= 0) & (offset + itemsize <= self.slot_bytes)
        if mask is not None:
            inside = inside | ~mask
            offset = np.where(mask, offset, 0)
        if not np.all(inside):
            raise EmulationFault(f"an access of {self.name} outside its {self.slot_bytes} bytes "
                                 f"(byte {int(np.asarray(offset)[~np.broadcast_to(inside, offset.shape)].flat[0])})")
        if offset.size and np.any(offset % itemsize):
            raise EmulationFault(f"a misaligned {itemsize}-byte access of {self.name}")
        return (np.asarray(slot) * self.slot_bytes + offset) // itemsize

    def load(self, dtype, slot, offset, mask=None):
        return self.bytes.view(dtype)[self.addresses(slot, offset, np.dtype(dtype).itemsize, mask)]

    def store(self, dtype, slot, offset, value, mask=None) -> None:
        itemsize = np.dtype(dtype).itemsize
        where = self.addresses(slot, offset, itemsize, mask)
        value = np.asarray(value).astype(dtype, copy=False)
        if mask is None:
            where, value = np.broadcast_arrays(where, value)
        else:
            where, value, keep = np.broadcast_arrays(where, value, mask)
            where, value = where[keep], value[keep]
        self.bytes.view(dtype)[where] = value
        if self.written is not None:
            self.written.view(_UNSIGNED[itemsize])[where] = np.iinfo(_UNSIGNED[itemsize]).max


def _padded(size: int) -> int:
    """Whole 16-byte words and one more, so that every element type views the bytes."""
    return (size + 31) // 16 * 16


@dataclasses.dataclass
class Pointer:
    """Byte ``offset`` into ``slot`` of ``memory``, each an int or a (threads, 1) array."""

    memory: Memory
    slot: Value
    offset: Value = 0

    def plus(self, byte_offset) -> "Pointer":
        return Pointer(self.memory, self.slot, self.offset + byte_offset)
