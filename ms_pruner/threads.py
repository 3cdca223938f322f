"""Work that TVM's C++ does with Python's GIL released, spread over threads.

Trace replays, postprocessors and lowering are TVM C++ called through tvm_ffi, which releases the
GIL, so threads run them side by side; the results come back in input order, so they do not depend
on how many threads there are.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, List


def map_on_threads(function: Callable, *iterables: Iterable, threads: int) -> List:
    """``list(map(function, *iterables))``, on up to ``threads`` threads (one: in this thread)."""
    items = list(zip(*iterables))
    threads = min(len(items), max(1, int(threads)))
    if threads <= 1:
        return [function(*item) for item in items]

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda item: function(*item), items))
