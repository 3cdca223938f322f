"""Ctrl-C during tuning: stop at the next phase boundary, keeping every measured record.

A KeyboardInterrupt raised at an arbitrary point of ``ms.tune_tir`` may land in a C++ frame or a
builder/runner thread, where TVM 0.27 calls ``std::terminate`` (measured: a SIGINT one second
after the first round died with SIGSEGV in 2 of 2 manual tries on llvm). So the first SIGINT only sets a flag;
the timed builder/runner and the progress callback, which MetaSchedule calls from the main thread
between phases (before a build, before a run, after the database took a measured batch), check it
and raise from there.
A second SIGINT raises at once, for when the round itself hangs.

A time limit (``--time-limit``) stops the same way, at a round boundary, when another round as long
as the longest so far (of any run in the process) would end past it: a call with a fixed allowance
(a GPU machine rented by the ten-minute call) ends after its last whole round instead of being cut in the middle of
one, which loses that round's search (and build) when the cut comes before its run.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from typing import Optional


STOPPED = "tuning stopped on request; records measured so far are kept"


class TimeLimitReached(KeyboardInterrupt):
    """Tuning stopped at a round boundary: the next round would have ended past the time limit."""


class _State:
    requested = False
    time_limit: Optional[str] = None  # why the time limit stopped tuning, if it did
    deadline: Optional[float] = None  # time.monotonic() by which tuning should have stopped
    longest_round_s = 0.0  # the longest round (batch) this process measured since the limit was set
    last_batch_s = 0.0  # the latest batch so far: rounds that continue one batch add up
    stop: Optional[KeyboardInterrupt] = None  # why tuning must stop now (stop_now), if it must


def check_stop() -> None:
    """Raise ``KeyboardInterrupt`` here, at a safe point, if a stop was asked for."""
    if _State.requested:
        raise _stop_exception()


def stop_now(reason: KeyboardInterrupt) -> KeyboardInterrupt:
    """Ask for a stop for ``reason`` and return it to raise: whatever MetaSchedule's FFI makes of it
    on its way out, tuning ends with ``reason`` (graceful_interrupts), records kept as on Ctrl-C."""
    _State.requested, _State.stop = True, reason
    return reason


def _stop_exception() -> KeyboardInterrupt:
    if _State.stop is not None:
        return _State.stop
    return TimeLimitReached(_State.time_limit) if _State.time_limit else KeyboardInterrupt(STOPPED)


def set_time_limit(seconds: Optional[float]) -> None:
    """Stop tuning (process-wide, every tuning call from now on) at the last round boundary that
    leaves time for no further round within ``seconds`` from now; None lifts the limit."""
    _State.deadline = None if seconds is None else time.monotonic() + float(seconds)
    _State.longest_round_s = _State.last_batch_s = 0.0


def note_round(seconds: float, continues_batch: bool = False) -> None:
    """A round of ``seconds`` finished: the next one, in this run or the next (``compare`` runs
    one after another in one process), is budgeted at the longest so far. A round that
    ``continues_batch`` (PrunerSearch's follow-up measures the rest of a cold batch) counts with the
    one before it, so a whole batch after a split one is not budgeted at half a batch."""
    _State.last_batch_s = _State.last_batch_s + seconds if continues_batch else seconds
    _State.longest_round_s = max(_State.longest_round_s, _State.last_batch_s)


def stop_unless_time_for(round_s: float = 0.0, follow_up_s: Optional[float] = None) -> None:
    """At a round boundary: stop (``TimeLimitReached``) if a round as long as ``round_s`` or the
    longest this process measured would end past the time limit.

    ``follow_up_s`` budgets a next round that measures the rest of the batch the round just
    finished began (PrunerSearch's follow-up after its cold half): a part of a batch, not a whole
    one, so it is budgeted at its own estimate, not at the longest batch (which would end a
    time-limited call with the cold round half measured when the call had time for the rest).
    """
    round_s = follow_up_s if follow_up_s is not None else max(round_s, _State.longest_round_s)
    if _State.deadline is None or round_s <= 0:
        return
    left = _State.deadline - time.monotonic()
    if round_s > left:
        _State.requested = True
        _State.time_limit = (f"stopped by the time limit: another round takes about {round_s:.0f} s "
                             f"and {max(0.0, left):.0f} s are left")
    check_stop()


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
    _State.requested, _State.time_limit, _State.stop = False, None, None
    try:
        yield
    except TimeLimitReached:
        raise
    except (Exception, KeyboardInterrupt) as err:
        if _State.requested:
            raise _stop_exception() from err
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _State.requested, _State.time_limit, _State.stop = False, None, None
