"""TVM's tensor intrinsics registered in ~2 s instead of ~23 s.

MetaSchedule needs ``tvm.s_tir.tensor_intrin`` imported before a tensor-core trace is replayed or
read from a database, and every ``TuneContext`` imports it (so every tuning process pays for it,
and so does each fresh worker of MetaSchedule's own builder). The import parses some 250 TVMScript
functions, and each ``T.prim_func`` decorator calls ``inspect.stack()``. That reads the source of
every frame on the stack and looks each frame's module up among all loaded modules
(``inspect.getmodule``), and tvm_ffi has loaded torch's thousands. On a 2-core AMD EPYC
(2026-11-26) the import took 23.0 s, of which ``inspect.stack`` was nine tenths; with the stack
below it took 2.4 s.

The parser reads only the frames, their locals, and the source line of one caller (to see whether
a function is decorated inside a class), so for the length of the import ``inspect.stack()`` with
its default context gives the same frames with their lines from ``linecache``, which needs no
module search. ``tests/test_intrinsics.py`` holds the intrinsics registered this way against a
plain import's, structure by structure.
"""

import inspect
import linecache
import sys
import threading

_LOCK = threading.Lock()


def _stack_with_cached_lines(original):
    def stack(context: int = 1):
        if context != 1:
            return original(context)
        frames = []
        frame = sys._getframe(1)  # pylint: disable=protected-access
        while frame is not None:
            code = frame.f_code
            line = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals)
            frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name,
                                            [line] if line else None, 0 if line else None))
            frame = frame.f_back
        return frames

    return stack


def register_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (once per process), without inspect's module search, and
    register the package's own m16n8k16 intrinsics beside TVM's (``mma_k16.py``)."""
    if "tvm.s_tir.tensor_intrin" not in sys.modules:
        with _LOCK:
            if "tvm.s_tir.tensor_intrin" not in sys.modules:
                original = inspect.stack
                inspect.stack = _stack_with_cached_lines(original)
                try:
                    import tvm.s_tir.tensor_intrin  # noqa: F401  lazy: registering the intrinsics takes ~23 s
                finally:
                    inspect.stack = original
    from .mma_k16 import register_mma_k16_intrinsics  # lazy: it loads TVM, which importing this module must not

    register_mma_k16_intrinsics()
