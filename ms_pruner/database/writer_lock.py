"""One writer a work dir at a time.

MetaSchedule's JSON database names each record's workload by its line number in the workload file,
and each process keeps its own copy of that table: two processes adding workloads to one work dir
give two workloads the same number, and the records of one are read as the other's. Two runs
measuring on one GPU at once also time each other's kernels. So every call that writes a work dir
(``tune``, ``tune-model``, ``compare``'s output folder, ``db merge --out``, ``db repair``) holds an
advisory lock on ``ms_pruner.lock`` in it; a second one is refused in one line naming the first,
before it reads or writes a record. The lock is the operating system's (``flock``): it goes with
the process however that ends, so a killed run leaves nothing to clean up. Readers (``show``,
``check``, ``db list``, ``analyze``) take none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time

from ..errors import UserError
from ..files import make_folder

LOCK_FILE = "ms_pruner.lock"


@contextlib.contextmanager
def sole_writer(work_dir: str, what: str, folder: str = "database folder"):
    """Hold ``work_dir``'s lock for the ``with`` (making the ``folder`` where it is missing); ``what``
    (the command) is written into the lock file for a refused second writer to name."""
    make_folder(work_dir, folder)
    try:
        handle = open(os.path.join(work_dir, LOCK_FILE), "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    except OSError as err:
        raise UserError(f"cannot write the work dir {work_dir}: {err.strerror or err}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "its holder not yet written"
            raise UserError(f"work dir {work_dir} is being written by another process ({holder}); wait for it "
                            "to end, or give another work dir") from None
        except OSError as err:
            raise UserError(f"cannot lock the work dir {work_dir}: {err.strerror or err}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{what}, pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
