"""MetaSchedule's LocalRunner, its worker started afresh after a kernel breaks the CUDA context.

A kernel that faults on a GPU (an illegal or misaligned address, an illegal instruction, a trap,
a device-side assert) leaves the process's CUDA context unusable: CUDA answers every later call in
that process with the same error. MetaSchedule's ``LocalRunner`` times every candidate of a run in
one worker process, so one faulting candidate would turn every later measurement of the run, of
every task, into a run error. This runner times the candidates one at a time and, after a
candidate whose error is one of those, starts a new worker: the faulting candidate stays a run
error, the others are measured. (A timed-out candidate's worker is killed by MetaSchedule's pool.)
``KernelWorker`` does the same for kernels run once for their output (``ms-pruner check``).
"""

from __future__ import annotations

import logging
import subprocess
from typing import List, Optional

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import PopenPoolExecutor

from ..errors import last_line

# cudaGetErrorString's texts and cuGetErrorName's names of the errors CUDA calls sticky.
CONTEXT_BREAKING_ERRORS = (
    "illegal memory access", "CUDA_ERROR_ILLEGAL_ADDRESS", "misaligned address", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "illegal instruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "unspecified launch failure", "CUDA_ERROR_LAUNCH_FAILED",
    "device-side assert", "CUDA_ERROR_ASSERT", "hardware stack error", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "invalid program counter", "CUDA_ERROR_INVALID_PC", "launch timed out", "CUDA_ERROR_LAUNCH_TIMEOUT",
)


def breaks_cuda_context(error_msg: Optional[str]) -> bool:
    """Whether a runner error says the kernel left the process's CUDA context unusable."""
    if not error_msg:
        return False
    text = error_msg.lower()
    return any(error.lower() in text for error in CONTEXT_BREAKING_ERRORS)


@derived_object
class RecoveringLocalRunner(ms.runner.LocalRunner._cls):  # pylint: disable=protected-access
    """``ms.runner.LocalRunner`` (same arguments; a restarted worker runs no ``initializer``) that
    restarts its worker after a context-breaking error; ``restarts`` counts how often it did."""

    restarts = 0

    def run(self, runner_inputs):
        futures = []
        for runner_input in runner_inputs:
            (future,) = super().run([runner_input])
            futures.append(future)
            error = future.result().error_msg
            if breaks_cuda_context(error):
                self.restart_worker(error)
        return futures

    def restart_worker(self, error: str) -> None:
        """A new worker process (a new CUDA context) for the candidates after this one."""
        logging.getLogger("ms_pruner").warning(
            "a candidate broke the runner's CUDA context (%s); the runner starts a new worker for the next",
            last_line(error)[:160])
        self.pool.shutdown(wait=True)
        self.pool = one_worker_pool(self.timeout_sec)
        self.restarts += 1


def one_worker_pool(timeout_sec: float) -> PopenPoolExecutor:
    """The single worker process (a CUDA context of its own) that kernels run in, one at a time."""
    return PopenPoolExecutor(max_workers=1, timeout=timeout_sec, stderr=subprocess.DEVNULL)


def target_device_type(target) -> str:
    """TVM's device type for running ``target``'s kernels, here or on an RPC server."""
    return "cpu" if target.kind.name == "llvm" else target.kind.name


def output_of(kernel, device, inputs: List[np.ndarray], output: np.ndarray) -> np.ndarray:
    """``kernel`` (a loaded module, here or on an RPC server's ``device``) run once on ``inputs``:
    what it wrote over ``output``."""
    arrays = [tvm.runtime.tensor(x, device) for x in [*inputs, output]]
    kernel(*arrays)
    return arrays[-1].numpy()


def kernel_output(artifact: str, device_type: str, inputs: List[np.ndarray], output: np.ndarray) -> np.ndarray:
    """``output_of`` ``artifact`` (an exported kernel) loaded here: runs in a ``KernelWorker``'s process."""
    return output_of(tvm.runtime.load_module(artifact), tvm.device(device_type, 0), inputs, output)


class KernelWorker:
    """Runs built kernels once each, for their output, in a worker process: after a kernel that
    breaks the worker's CUDA context, kills it or runs past ``timeout_sec``, the next kernel gets a
    new worker, so such a kernel is one failure (a RuntimeError with the reason) and the rest still
    run. ``restarts`` counts the workers replaced."""

    def __init__(self, timeout_sec: float = 120.0):
        self.timeout_sec = timeout_sec
        self.pool: Optional[PopenPoolExecutor] = None
        self.restarts = 0

    def output(self, artifact: str, device_type: str, inputs: List[np.ndarray], output: np.ndarray) -> np.ndarray:
        if self.pool is None:
            self.pool = one_worker_pool(self.timeout_sec)
        try:
            return self.pool.submit(kernel_output, artifact, device_type, inputs, output).result()
        except TimeoutError:
            self.restarts += 1  # the pool has killed the worker; the next kernel starts another
            raise RuntimeError(f"the kernel ran past {self.timeout_sec:g} s; its worker was stopped") from None
        except ChildProcessError:
            self.restarts += 1
            raise RuntimeError("the kernel's worker process died running it") from None
        except RuntimeError as err:
            if breaks_cuda_context(str(err)):
                self.close()
                self.restarts += 1
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
