"""Ctrl-C during tuning: stop at the next phase boundary, keeping every measured record.

A KeyboardInterrupt raised at an arbitrary point of ``ms.tune_tir`` may land in a C++ frame or a
builder/runner thread, where TVM 0.27 calls ``std::terminate`` (measured: a SIGINT one second
after the first round died with SIGSEGV in 2 of 2 manual tries on llvm). So the first SIGINT only sets a flag;
the timed builder/runner and the progress callback, which MetaSchedule calls from the main thread
between phases (before a build, before a run, after the database took a measured batch), check it
and raise from there.
A second SIGINT raises at once, for when the round itself hangs.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading


STOPPED = "tuning stopped on request; records measured so far are kept"


class _State:
    requested = False


def check_stop() -> None:
    """Raise ``KeyboardInterrupt`` here, at a safe point, if a stop was asked for."""
    if _State.requested:
        raise KeyboardInterrupt(STOPPED)


def _on_sigint(signum, frame):
    if _State.requested:
        raise KeyboardInterrupt
    _State.requested = True
    print("\nms-pruner: stopping after the current round (Ctrl-C again to stop now)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def graceful_interrupts():
    """While tuning, SIGINT asks for a stop at the next safe point; an exception that MetaSchedule
    turned into a RuntimeError on its way through the FFI comes out as ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    _State.requested = False
    try:
        yield
    except Exception as err:
        if _State.requested:
            raise KeyboardInterrupt(STOPPED) from err
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _State.requested = False
