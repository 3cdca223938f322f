"""A LocalBuilder whose worker processes live across batches.

MetaSchedule's ``LocalBuilder.build`` starts a fresh ``PopenPoolExecutor`` for every batch (its
comment: PopenPool workers leak memory "after a couple times of usage"), so every round pays each
worker's start: a Python process that imports TVM (~2.8 s on this project's 2-core CPU, and TVM
loads its CUDA runtime on a GPU machine) before it builds anything. On the first H100 the builder
took 13.6 s for 16 candidates of a 1024^3 matmul, one per worker, and 16-21 s for 32 or for 64
conv2d candidates (docs/builder.md): most of a round's build did not grow with the batch.

``KeptPoolBuilder`` builds exactly as ``LocalBuilder`` does (the same worker function, ``f_build``
and ``f_export``, timeout and result messages) with one pool kept for the builder's life. The leak
is bounded the way ``PopenPoolExecutor`` offers: a worker is replaced after ``uses_per_worker``
builds. ``environment`` is set in every worker as it starts (``make_builder``'s device-code
setting), so two builders of one process keep their own. ``start_workers`` starts every worker
ahead of the first batch, so that a tuning session can pay it with its other start-up, before its
clock (tuning/driver.py).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional, Union

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

USES_PER_WORKER = 64
PID_HOLD_S = 0.25


def _set_worker_environment(environment: Dict[str, str]) -> None:
    """Each worker's initializer: the builder's own settings, whatever the parent's environment
    holds when a worker is (re)started."""
    os.environ.update(environment)


def _held_pid(seconds: float) -> int:
    """This worker's process id, after ``seconds``."""
    time.sleep(seconds)
    return os.getpid()


def _worker_ready() -> bool:
    """Run in each worker by ``start_workers``: what every build needs imported, imported."""
    import tvm  # noqa: F401  lazy: this function's purpose is to import in a fresh worker

    from . import worker  # noqa: F401  lazy: (the same)

    return True


@derived_object
class KeptPoolBuilder(PyBuilder):
    """``LocalBuilder`` with its worker pool kept across batches (module docstring)."""

    def __init__(self, *, max_workers: int, timeout_sec: float, f_build: Union[None, str, Callable] = None,
                 f_export: Union[None, str, Callable] = None, uses_per_worker: int = USES_PER_WORKER,
                 environment: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.f_build = f_build
        self.f_export = f_export
        self.uses_per_worker = uses_per_worker
        self.environment = dict(environment or {})
        self._pool = None

    def _executor(self):
        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec,
                                           initializer=_set_worker_environment, initargs=(self.environment,),
                                           maximum_process_uses=self.uses_per_worker)
        return self._pool

    def start_workers(self) -> None:
        """Start every worker process now (each imports TVM and the build functions) instead of in
        the first batch. Each thread of the pool keeps its own worker, so one task a thread, all
        submitted before any is collected, reaches every worker."""
        pool = self._executor()
        futures = [pool.submit(_worker_ready) for _ in range(self.max_workers)]
        for future in futures:
            future.result()

    def worker_pids(self) -> List[int]:
        """The worker processes' ids, one task each; each task counts as one of its worker's uses.
        A task that ended before the next was submitted would leave its thread idle for that one,
        so each holds ``PID_HOLD_S`` (a thread's worker answers at once once started)."""
        pool = self._executor()
        futures = [pool.submit(_held_pid, PID_HOLD_S) for _ in range(self.max_workers)]
        return sorted(future.result() for future in futures)

    @property
    def running(self) -> bool:
        """Whether the pool holds worker processes (``close`` stops them)."""
        return self._pool is not None

    def build(self, build_inputs: List[BuilderInput]) -> List[BuilderResult]:
        results: List[BuilderResult] = []
        jobs = [(self.f_build, self.f_export, item.mod, item.target, _serialize_params(item.params))
                for item in build_inputs]
        for outcome in self._executor().map_with_error_catching(lambda job: _worker_func(*job), jobs):
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
            else:
                results.append(BuilderResult(None, "LocalBuilder: An exception occurred\n" + str(outcome.value)))
        return results

    def close(self) -> None:
        """Stop the worker processes (a later batch would start new ones)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

