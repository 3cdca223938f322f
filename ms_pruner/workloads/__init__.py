"""Named, parameterised workloads as TensorIR PrimFuncs, their spec strings and suites."""

from .definitions import KINDS
from .spec import (SUPPORTED_IN_DTYPES, SUPPORTED_OUT_DTYPES, Workload, as_workload, parse_workload,
                   relative_error)
from .suites import SUITES, get_suite
from .user_kernel import KernelFile, tuned_workload

__all__ = [
    "KINDS",
    "KernelFile",
    "SUITES",
    "SUPPORTED_IN_DTYPES",
    "SUPPORTED_OUT_DTYPES",
    "Workload",
    "as_workload",
    "get_suite",
    "parse_workload",
    "relative_error",
    "tuned_workload",
]
