"""Shared fixtures: the real H100 databases in ../shared/data, tool availability."""

import logging
import os
import re
import shutil

import pytest

from ms_pruner.shared_data import H100_MM4096 as _H100_MM4096, shared_database

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_MM4096 = shared_database(*_H100_MM4096)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def distinct_schedules(work_dir, workload):
    """Structural hashes of every record's replayed schedule in the work dir."""
    import tvm_ffi

    from ms_pruner.database import replay_record
    from ms_pruner.tuning import open_database

    records = open_database(work_dir).get_all_tuning_records()
    hashes = [int(tvm_ffi.structural_hash(replay_record(r).mod)) for r in records]
    return records, hashes


def workload_space(spec: str, choice: str, gpu: str = "h100"):
    """(resolved choice, target, DesignSpace) of a workload spec on a GPU's target: the space the
    tuner searches for that choice, over the module MetaSchedule stores as the workload."""
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search.space import DesignSpace
    from ms_pruner.space import tuning_space
    from ms_pruner.tuning.driver import normalized_mod
    from ms_pruner.workloads import parse_workload

    mod = normalized_mod(parse_workload(spec).prim_func())
    resolved, target, generator = tuning_space(choice, mod, get_gpu_spec(gpu).target())
    return resolved, target, DesignSpace(mod, target, space=generator)


def linear_task(bias_sign: int = 1, m: int = 128, n: int = 128, k: int = 64):
    """A Linear layer's task as Relax's mixed precision fuses it: an fp16 GEMM accumulated in fp32,
    cast to fp16, the bias added (``bias_sign`` -1: subtracted, a function of the same signature)."""
    from tvm import te

    a, w, bias = te.placeholder((m, k), "float16", "A"), te.placeholder((k, n), "float16", "W"), \
        te.placeholder((n,), "float16", "bias")
    r = te.reduce_axis((0, k), "k")
    product = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("float32") * w[r, j].astype("float32"),
                                                     axis=r), "matmul")
    out = te.compute((m, n), lambda i, j: product[i, j].astype("float16") + bias_sign * bias[j], "T_add")
    return te.create_prim_func([a, w, bias, out])


def tiled_candidate(space, instruction, depth, tiles, unroll=0):
    """The ``instruction`` sketch of ``depth`` stages replayed with ``tiles`` as its tile decisions (i,
    j, k in trace order) and ``unroll`` as its unroll step's (an index; a sketch draws its own anew in
    each process), its other decisions kept; None where a postprocessor rejects it."""
    from ms_pruner.search.droplet import TILE_SAMPLES
    from ms_pruner.space import pipeline_depth, tensor_instruction

    sketch = next(s for s in space.sketches if tensor_instruction(s) == instruction and pipeline_depth(s) == depth)
    decisions = iter(tiles)

    def provide(inst, inputs, attrs, decision):
        if inst.kind.name == "SampleCategorical":
            return unroll
        return next(decisions) if inst.kind.name in TILE_SAMPLES else decision

    return space.replay(sketch, seed=1, decision_provider=provide)


def record_lines(work_dir):
    """The lines of a work dir's tuning records, one a record, as written."""
    with open(os.path.join(work_dir, "database_tuning_record.json"), encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()]


def generated_load_bytes(source: str) -> list:
    """Widest load from each fp16 kernel parameter in CUDA source: 16 for ``*(uint4*)(A_ptr + i)``,
    2 for a plain ``A_ptr[i]``, in the order of the kernel's parameters."""
    widths = {"uint4": 16, "uint2": 8, "uint1": 4, "half2": 4, "half4": 8}
    names = re.findall(r"half\* __restrict__ (\w+)_ptr", source.split(";", 1)[0])  # the declaration
    out = []
    for name in names:
        vector = [widths[t] for t in re.findall(rf"= \*\((\w+)\*\)\({name}_ptr", source) if t in widths]
        out.append(max(vector) if vector else (2 if f"{name}_ptr[" in source else 0))
    return out


@pytest.fixture(scope="module")
def tensor_core_candidates(tensor_intrinsics):
    """Four sampled A100 tensor-core candidates each of a 1024^3 fp16 GEMM and a small conv2d."""
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.workloads import parse_workload

    out = {}
    for spec in ("matmul:1024x1024x1024:float16:float32", "conv2d_nhwc:4x28x28x64x64k3s1p1:float16:float32"):
        target = get_gpu_spec("a100").target()
        out[spec] = (target, DesignSpace(parse_workload(spec).prim_func(), target).sample(4, seed=5))
    return out


def needs_gpu(test):
    """A test that measures on a CUDA device: marked ``gpu``, skipped where there is none, and run in
    one xdist worker with the other such tests, so no two time kernels on the device at once."""
    from ms_pruner.hardware import cuda_device_name

    test = pytest.mark.skipif(cuda_device_name() is None, reason="no CUDA device")(test)
    return pytest.mark.gpu(pytest.mark.xdist_group("gpu")(test))


def needs_h100_data(test):
    """A test that reads ../shared/data: marked ``data``, skipped where the data is absent."""
    return pytest.mark.data(pytest.mark.skipif(not os.path.isdir(H100_MM4096), reason="../shared/data not present")(test))


H100_RUNS = os.path.join(REPO_ROOT, "docs", "results", "h100", "work.tgz")
H200_RUNS = os.path.join(REPO_ROOT, "docs", "results", "h200", "work.tgz")


def _unpacked_runs(tmp_path_factory, archive_path: str):
    """The work dirs of a committed GPU session's ``work.tgz``, unpacked once: ``runs(workload,
    strategy)`` is that run's work dir, the earliest one where a later session made the run again
    (its work dir's name ends in its start time)."""
    import glob

    from ms_pruner.shared_data import unpack_runs

    root = tmp_path_factory.mktemp("runs")
    unpack_runs(archive_path, str(root))

    def run_dir(workload: str, strategy: str) -> str:
        found = sorted(glob.glob(os.path.join(root, "work", workload, f"{strategy}-*")))
        assert found, f"no {strategy} run of {workload} in {archive_path}"
        return found[0]

    return run_dir


@pytest.fixture(scope="session")
def h100_runs(tmp_path_factory):
    """The databases of this project's own H100 runs (docs/results/h100/work.tgz):
    ``runs("conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32", "stock")`` (``_unpacked_runs``)."""
    return _unpacked_runs(tmp_path_factory, H100_RUNS)


@pytest.fixture(scope="session")
def h200_runs(tmp_path_factory):
    """The databases of the H200 runs on the `all` space (docs/results/h200/work.tgz), as ``h100_runs``."""
    return _unpacked_runs(tmp_path_factory, H200_RUNS)


@pytest.fixture(scope="session")
def tensor_intrinsics():
    """Registers the wmma/mma TensorIntrins once per session (~2.5 s on 2 cores: ms_pruner/intrinsics.py)."""
    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()

    return True


@pytest.fixture(autouse=True)
def _no_console_handler_on_a_closed_stream():
    """``ms.tune_tir`` gives MetaSchedule's logger a console handler on the ``sys.stdout`` of the
    moment, which under pytest is a capture that closes with its test; a later test's MetaSchedule
    log line then prints a 'Logging error' traceback into that test's captured stderr."""
    yield
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(logger.handlers):
        stream = getattr(handler, "stream", None)
        if stream is not None and getattr(stream, "closed", False):
            logger.removeHandler(handler)


# A user's TensorIR file for `tune FILE.py:NAME` (test_workloads.py, test_cli.py).
KERNEL_FILE = """
from tvm.script import ir as I
from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def matmul(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i, j, k in T.grid(64, 64, 64):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def built():
    import tvm
    return tvm.IRModule({"mm": matmul})


@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def scale(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.sblock("B"):
                vi = T.axis.spatial(64, i)
                B[vi] = A[vi] * T.float32(2)


def two():
    import tvm
    return tvm.IRModule({"a": matmul, "b": matmul.with_attr("global_symbol", "b")})


def fails():
    raise ValueError("no shapes here\\nand a second line")


count = 3
"""
