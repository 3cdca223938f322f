"""Where the project's measured MetaSchedule databases live (``../shared/data``, read in place).

The databases sit beside the project, not in it, so the tests, the benchmark scripts and CI
all find them through this one rule: ``$MS_PRUNER_SHARED_DATA`` if set, else ``shared/data``
next to the project root. Importing this module loads no TVM.
"""

import glob
import os
import tarfile

SHARED_DATA_ENV = "MS_PRUNER_SHARED_DATA"
H100_MM4096 = ("h100", "mm4096_f16f32_stock_evolutionary")


def shared_data_dir() -> str:
    project_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.environ.get(SHARED_DATA_ENV, os.path.join(project_root, "..", "shared", "data"))


def shared_database(*parts: str) -> str:
    """The path of one database under the shared data, e.g. ``shared_database(*H100_MM4096)``."""
    return os.path.join(shared_data_dir(), *parts)


def project_results_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results")


def unpack_runs(archive_path: str, dest: str) -> None:
    """A GPU folder's ``work.tgz`` (``work/<workload>/<run>/``: the work dirs of its compare runs)
    unpacked under ``dest``."""
    with tarfile.open(archive_path) as archive:
        archive.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def unpack_committed_runs(dest: str) -> list:
    """Every measured run committed under docs/results (each GPU folder's ``work.tgz``, the work
    dirs of its compare runs), unpacked under ``dest/<gpu>``: the database folders, sorted."""
    runs = []
    for archive_path in sorted(glob.glob(os.path.join(project_results_dir(), "*", "work.tgz"))):
        gpu = os.path.basename(os.path.dirname(archive_path))
        target = os.path.join(dest, gpu)
        unpack_runs(archive_path, target)
        found = glob.glob(os.path.join(target, "**", "database_tuning_record.json"), recursive=True)
        runs.extend(os.path.dirname(path) for path in found)
    return sorted(runs)
