"""Where the project's measured MetaSchedule databases live (``../shared/data``, read in place).

The databases sit beside the project, not in it, so the tests, the benchmark scripts and CI
all find them through this one rule: ``$MS_PRUNER_SHARED_DATA`` if set, else ``shared/data``
next to the project root. Importing this module loads no TVM.
"""

import os

SHARED_DATA_ENV = "MS_PRUNER_SHARED_DATA"
H100_MM4096 = ("h100", "mm4096_f16f32_stock_evolutionary")


def shared_data_dir() -> str:
    project_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.environ.get(SHARED_DATA_ENV, os.path.join(project_root, "..", "shared", "data"))


def shared_database(*parts: str) -> str:
    """The path of one database under the shared data, e.g. ``shared_database(*H100_MM4096)``."""
    return os.path.join(shared_data_dir(), *parts)
