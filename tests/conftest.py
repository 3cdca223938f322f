"""Shared fixtures: the real H100 databases in ../shared/data, tool availability."""

import os
import shutil

import pytest

from ms_pruner.shared_data import H100_MM4096 as _H100_MM4096, shared_database

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_MM4096 = shared_database(*_H100_MM4096)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def needs_gpu(test):
    """A test that measures on a CUDA device: marked ``gpu``, skipped where there is none."""
    from ms_pruner.hardware import cuda_device_name

    return pytest.mark.gpu(pytest.mark.skipif(cuda_device_name() is None, reason="no CUDA device")(test))


def needs_h100_data(test):
    """A test that reads ../shared/data: marked ``data``, skipped where the data is absent."""
    return pytest.mark.data(pytest.mark.skipif(not os.path.isdir(H100_MM4096), reason="../shared/data not present")(test))


H100_RUNS = os.path.join(REPO_ROOT, "docs", "results", "h100", "work.tgz")


@pytest.fixture(scope="session")
def h100_runs(tmp_path_factory):
    """The databases of this project's own H100 runs (docs/results/h100/work.tgz), unpacked once:
    ``runs("conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32", "stock")`` is that run's work dir, the
    earliest one where a later session made the run again (its work dir's name ends in its start time)."""
    import glob
    import tarfile

    root = tmp_path_factory.mktemp("h100_runs")
    with tarfile.open(H100_RUNS) as archive:
        archive.extractall(root, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))

    def run_dir(workload: str, strategy: str) -> str:
        found = sorted(glob.glob(os.path.join(root, "work", workload, f"{strategy}-*")))
        assert found, f"no {strategy} run of {workload} in {H100_RUNS}"
        return found[0]

    return run_dir


@pytest.fixture(scope="session")
def tensor_intrinsics():
    """Registers the wmma/mma TensorIntrins once per session (~2.5 s on 2 cores: ms_pruner/intrinsics.py)."""
    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()

    return True
