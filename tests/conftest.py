"""Shared fixtures: the real H100 databases in ../shared/data, tool availability."""

import os
import shutil

import pytest

from ms_pruner.shared_data import H100_MM4096 as _H100_MM4096, shared_database

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_MM4096 = shared_database(*_H100_MM4096)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
needs_h100_data = pytest.mark.skipif(not os.path.isdir(H100_MM4096), reason="../shared/data not present")


@pytest.fixture(scope="session")
def tensor_intrinsics():
    """Registers the wmma/mma TensorIntrins once per session (~25 s on 2 cores)."""
    import tvm.s_tir.tensor_intrin  # noqa: F401

    return True
