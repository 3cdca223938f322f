"""Measurement arguments the runner allocates once per workload instead of once per candidate.

MetaSchedule's ``LocalRunner`` allocates and random-fills every argument for every candidate it
times. TVM's PyPI wheel has no cuRAND, so ``tvm.contrib.random.random_fill_for_measure`` fills a
CUDA tensor by filling a host copy with the CPU and copying it over: for ``matmul 4096^3
fp16->fp32`` that is 50M values per candidate, inside the one-GPU runner, serially. The values
only have to be finite and not all zero (timing does not depend on them), and every candidate of a
task takes arguments of the same shapes, so the runner's worker process (it lives across
candidates) keeps the last task's arguments and hands them to the next candidate of that task.

A kernel only reads its inputs and overwrites its outputs, so reused inputs hold the same random
values for every candidate. One set is kept: a task with other shapes replaces it, so GPU memory
holds at most one task's arguments beside the kernel being timed.

Integer arguments are zeros. MetaSchedule's fill writes float bit patterns into them (values near
1e9 for int32, 4e18 for int64), and a model's integer inputs are mostly indices: BERT's ``take``
of q, k and v from the fused QKV tensor reads ``lv[B[()], ...]`` with such a B, an illegal address
on a GPU (runner.py) or a crash on a CPU. Index zero is in range of any non-empty axis.
"""

from __future__ import annotations

import json
from typing import List, Sequence

import numpy as np
from tvm.s_tir.meta_schedule.runner import rpc_runner
from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

_cached_key: tuple = ()
_cached_args: list = []


def _arguments_key(device, args_info: Sequence, alloc_repeat: int) -> tuple:
    return int(device.dlpack_device_type()), int(device.index), json.dumps(list(args_info)), int(alloc_repeat)


def zero_integer_arguments(repeated_args: List[list], args_info: Sequence) -> List[list]:
    """``repeated_args`` (MetaSchedule's random-filled arguments) with every integer tensor zeroed."""
    for args in repeated_args:
        for arg, info in zip(args, args_info):
            kind, dtype, shape = info[0], str(info[1]), info[2]
            if kind == "TENSOR" and dtype.startswith(("int", "uint")):
                arg.copyfrom(np.zeros([int(d) for d in shape], dtype=dtype))
    return repeated_args


def alloc_argument(device, args_info: Sequence, alloc_repeat: int) -> List[list]:
    """``LocalRunner`` ``f_alloc_argument``: MetaSchedule's allocation, integer arguments zeros."""
    return zero_integer_arguments(default_alloc_argument(device, args_info, alloc_repeat), args_info)


def rpc_alloc_argument(session, device, args_info: Sequence, alloc_repeat: int) -> List[list]:
    """``RPCRunner`` ``f_alloc_argument``: its allocation on the server, integer arguments zeros."""
    repeated = rpc_runner.default_alloc_argument(session, device, args_info, alloc_repeat)
    return zero_integer_arguments(repeated, args_info)


def cached_alloc_argument(device, args_info: Sequence, alloc_repeat: int) -> List[list]:
    """``LocalRunner`` ``f_alloc_argument``: ``alloc_argument``'s, reused while the shapes repeat."""
    global _cached_key, _cached_args  # pylint: disable=global-statement

    key = _arguments_key(device, args_info, alloc_repeat)
    if key != _cached_key:
        forget_cached_arguments()  # the old task's arguments go before the new ones are allocated
        _cached_args = alloc_argument(device, args_info, alloc_repeat)
        _cached_key = key
    return _cached_args


def forget_cached_arguments() -> None:
    """Drop the kept arguments (frees their memory in this process)."""
    global _cached_key, _cached_args  # pylint: disable=global-statement
    _cached_key, _cached_args = (), []
