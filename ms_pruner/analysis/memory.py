"""A bounded memory of computed values, for the analyzer's work that repeats across candidates.

The candidates of one search share most of their programs and copy blocks: evolution scores a
parent copied unmutated again, and a mutation leaves most copies as they were. Keyed by a
structural hash, each such value is computed once. The memory keeps the last ``capacity`` to
``2 * capacity`` values it was asked for (two generations: when the newer is full it becomes the
older and the oldest go), so a stretch of work as long as ``capacity`` finds all of its own values
again; what is forgotten costs only recomputation.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, TypeVar

Value = TypeVar("Value")
_MISSING = object()


class BoundedMemory:
    """``get(key, compute)``: the value kept under ``key``, or ``compute()`` kept there.

    ``asked`` counts lookups and ``computed`` the values computed, so a caller can report how much
    the memory saved over a stretch of work (a search round) by differencing them.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.values: Dict[Hashable, object] = {}
        self.older: Dict[Hashable, object] = {}
        self.asked = 0
        self.computed = 0

    def get(self, key: Hashable, compute: Callable[[], Value]) -> Value:
        """Safe from several threads (the screened sampler analyzes on the replay threads): single
        lookups, so a generation moved between a test and a read cannot fail it; a value computed
        twice is the same."""
        self.asked += 1
        value = self.values.get(key, _MISSING)
        if value is not _MISSING:
            return value
        value = self.older.get(key, _MISSING)
        if value is _MISSING:
            value = compute()
            self.computed += 1
        if len(self.values) >= self.capacity:
            self.older, self.values = self.values, {}
        self.values[key] = value
        return value

    def __len__(self) -> int:
        return len(self.values.keys() | self.older.keys())
