"""Loops that pick a register array's copy by their parity: unrolled by two where ptxas then keeps
the copies in registers, and the analyzer predicting which kernels the builder ships so."""

import pytest

from conftest import needs_nvcc, workload_space
from ms_pruner.builder.parity_unroll import (PARITY_UNROLL_ENV, PRAGMA, unroll_parity_loops,
                                             unrolled_where_registers_hold)

KERNEL = """extern "C" __global__ void __launch_bounds__(128) main_kernel(half* __restrict__ A) {
  alignas(64) half A_frag[64];
  alignas(64) float C_frag[32];
  for (int k_0 = 0; k_0 < 125; ++k_0) {
    int cse_v1 = (((k_0 + 1) & 1) * 32);
    load(A_frag + BODY, A + ((((k_0 + 1) & 1) * 2048) + ((int)threadIdx.x)));
    use(C_frag[(k_0 * 4)]);
    __syncthreads();
  }
}
"""


def _kernel(index):
    return KERNEL.replace("BODY", index)


@pytest.mark.parametrize("index, unrolled", [
    ("(((k_0 + 1) & 1) * 32)", True),  # the fragment copy chosen by the loop's parity
    ("(k_0 & 1)", True),
    ("cse_v1", True),  # through a value the loop body names
    ("0", False),  # only shared memory is indexed by the parity: its addresses are computed anyway
    ("((((k_0 + 1) & 1) * 32) + (k_0 >> 1))", False),  # the index holds the variable beyond its parity
])
def test_a_loop_is_unrolled_by_two_where_a_register_array_is_indexed_by_its_parity(index, unrolled):
    source = _kernel(index)
    result = unroll_parity_loops(source)
    assert (result != source) == unrolled
    if unrolled:
        assert f"  {PRAGMA}\n  for (int k_0 = 0;" in result
        assert unroll_parity_loops(result) == result
        assert result.replace(f"  {PRAGMA}\n", "") == source


def test_a_loop_of_one_trip_without_a_barrier_or_without_register_arrays_is_left_alone():
    one_trip = _kernel("(k_0 & 1)").replace("k_0 < 125", "k_0 < 1")
    assert unroll_parity_loops(one_trip) == one_trip
    inner = _kernel("(k_0 & 1)").replace("__syncthreads();", "")  # a fragment loop nvcc unrolls whole itself
    assert unroll_parity_loops(inner) == inner
    shared_only = _kernel("(k_0 & 1)").replace("alignas(64) half A_frag[64];", "").replace(
        "alignas(64) float C_frag[32];", "")
    assert unroll_parity_loops(shared_only) == shared_only


def test_a_kernel_whose_accumulators_alone_overflow_its_registers_is_not_compiled_unrolled(monkeypatch):
    """128 threads leave 255 registers a thread; 4096 fp32 accumulators keep local memory whatever
    the loop does, so the source stays as it is without a trial compile (this one would not compile)."""
    monkeypatch.setenv(PARITY_UNROLL_ENV, "1")
    source = _kernel("(k_0 & 1)").replace("float C_frag[32]", "float C_frag[4096]")
    assert unroll_parity_loops(source) != source
    assert unrolled_where_registers_hold(source, "sm_90a") == source
    monkeypatch.setenv(PARITY_UNROLL_ENV, "0")
    assert unrolled_where_registers_hold(_kernel("(k_0 & 1)"), "sm_90a") == _kernel("(k_0 & 1)")


def _runtime_indexed_candidate():
    """A sampled H100 mma candidate of the 4096^3 GEMM whose fragment loop runs once a stage under a
    4-stage pipeline (fragments indexed by the k loop's parity) and whose two copies fit 255 registers."""
    _, target, space = workload_space("matmul:4096x4096x4096:float16:float32", "mma")
    return space.sample(2, 0)[1], target


@needs_nvcc
def test_unrolling_keeps_parity_indexed_fragments_in_registers_as_the_analyzer_predicts(tensor_intrinsics,
                                                                                        monkeypatch):
    """Off, ptxas keeps the fragment copies in a stack frame and the analyzer calls the kernel one
    that uses local memory; on, the builder unrolls the loop, ptxas needs no stack, and the analyzer
    counts both copies in registers (within 8 of ptxas's count) and no local memory."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.analysis.gpu_model import uses_local_memory
    from ms_pruner.builder import candidate_resources
    from ms_pruner.hardware import get_gpu_spec

    sch, target = _runtime_indexed_candidate()
    spec = get_gpu_spec("h100")
    found = {}
    for switch in ("0", "1"):
        monkeypatch.setenv(PARITY_UNROLL_ENV, switch)
        features = StaticAnalyzer.for_target(target, gpu=spec).estimate(sch).features[0]
        found[switch] = features, candidate_resources(sch.mod, target)[0]
    off, off_ptxas = found["0"]
    on, on_ptxas = found["1"]
    assert off.local_operand_bytes > 0 and not off.parity_unrolled and uses_local_memory(off, spec)
    assert off_ptxas.stack_bytes > 0
    assert on.parity_unrolled and not uses_local_memory(on, spec)
    assert on_ptxas.stack_bytes == 0 and not on_ptxas.spills
    assert abs(on.regs_per_thread - on_ptxas.registers) <= 8
    assert on_ptxas.registers > off_ptxas.registers


@needs_nvcc
def test_the_builder_ships_the_trial_compile_of_an_unrolled_source_which_is_tvms_own(tensor_intrinsics,
                                                                                   monkeypatch):
    """The unroll's trial compile is not repeated by code generation's compile of the same source,
    and its cubin is the one TVM's nvcc compile gives that source (the command is TVM's)."""
    from tvm.support import nvcc

    from ms_pruner.builder import compile_with_nvcc, cuda_sources
    from ms_pruner.builder.ptxas import recent_cubin

    monkeypatch.setenv(PARITY_UNROLL_ENV, "1")
    sch, target = _runtime_indexed_candidate()
    source = cuda_sources(sch.mod, target, use_nvcc=False)[0]
    assert PRAGMA in source
    trial = recent_cubin(source, str(target.attrs["arch"]))
    assert trial is not None
    with target:
        assert compile_with_nvcc(source) is trial
        assert bytes(nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")) == trial
    monkeypatch.setenv("TVM_KERNEL_DEBUG", "1")
    assert recent_cubin(source, str(target.attrs["arch"])) is None
