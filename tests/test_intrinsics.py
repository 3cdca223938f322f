"""Tensor intrinsics registered through ms_pruner.intrinsics are TVM's own, structure by structure."""

import os
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
from bench_intrinsics import registered, tvms_own  # noqa: E402


@pytest.mark.slow
def test_intrinsics_registered_without_inspects_module_search_equal_a_plain_imports():
    fast, plain = registered("ms_pruner"), registered("plain")
    assert len(plain["intrinsics"]) > 100
    assert tvms_own(fast["intrinsics"]) == plain["intrinsics"]
    from ms_pruner.mma_k16 import INTRINSIC_NAMES

    assert set(fast["intrinsics"]) - set(plain["intrinsics"]) == set(INTRINSIC_NAMES)
