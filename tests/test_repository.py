"""Properties of the repository itself that a lent GPU depends on."""

import os
import shutil
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
from carry_size import BUNDLE_HALF_BYTES, LIMIT_BYTES, working_tree_bytes  # noqa: E402

# What one lending adds when its files are committed (the second lending: 1.3 MiB), and slack
# for the bundle's wheels to grow.
LENDING_HEADROOM_BYTES = 3 * 2 ** 20


@pytest.mark.skipif(shutil.which("git") is None or not os.path.exists(os.path.join(REPO_ROOT, ".git")),
                    reason="not a git checkout")
def test_the_tracked_tree_leaves_room_for_the_gpu_bundle_on_a_device_call():
    """Each device call carries the working tree and half of the TVM bundle under 64 MiB; on
    2026-11-26 the tree had grown to 10.4 MiB, 0.5 MiB short of refusing the next lending's call.
    `python scripts/shrink_results.py` gzips large results and palettes the plots."""
    tracked_bytes = working_tree_bytes(REPO_ROOT, untracked=False)
    assert tracked_bytes <= working_tree_bytes(REPO_ROOT)
    room = LIMIT_BYTES - BUNDLE_HALF_BYTES - LENDING_HEADROOM_BYTES
    assert tracked_bytes <= room, (f"tracked files take {tracked_bytes / 2 ** 20:.2f} MiB, more than the "
                                   f"{room / 2 ** 20:.2f} MiB a device call leaves beside the bundle")
