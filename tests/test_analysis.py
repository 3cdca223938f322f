"""The static analyzer on hand-made schedules (answers known from first principles) and on sampled
tensor-core candidates against their lowered code; on measured H100 records: test_analysis_records.py."""

import numpy as np
import pytest

from conftest import generated_load_bytes
from ms_pruner.analysis import StaticAnalyzer, recall_at_top, spearman
from ms_pruner.hardware import CPUSpec, GPUSpec, get_gpu_spec
from ms_pruner.workloads import parse_workload

H100 = GPUSpec.h100()


def _matmul_schedule(m=256, n=256, k=256):
    from tvm.s_tir import Schedule

    return Schedule(parse_workload(f"matmul:{m}x{n}x{k}:float32:float32").prim_func())


def naive_gpu_matmul():
    """One thread per C element, operands straight from global memory."""
    sch = _matmul_schedule()
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(sch.fuse(i0, j0), "blockIdx.x")
    sch.bind(sch.fuse(i1, j1), "threadIdx.x")
    return sch


def tiled_gpu_matmul(k_tile=32, extra_smem_rows=0):
    """The same thread mapping, with A and B k-slices staged in shared memory per block."""
    sch = _matmul_schedule()
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, k_tile])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    bx = sch.fuse(i0, j0)
    sch.bind(bx, "blockIdx.x")
    for index in (0, 1):
        cache = sch.cache_read(block, index, "shared")
        sch.compute_at(cache, k0)
        fused = sch.fuse(*sch.get_loops(cache)[-2:])
        _, tx = sch.split(fused, [None, 256])
        sch.bind(tx, "threadIdx.x")
    tx = sch.fuse(i1, j1)
    sch.bind(tx, "threadIdx.x")
    return sch


def grid_schedule(blocks: int):
    """An elementwise kernel over 2^20 elements split into ``blocks`` blocks of 256 threads."""
    from tvm import te
    from tvm.s_tir import Schedule

    a = te.placeholder((1 << 20,), name="A")
    b = te.compute((1 << 20,), lambda i: a[i] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    outer, serial, thread = sch.split(loop, [blocks, None, 256])
    sch.bind(outer, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    return sch


def test_shared_memory_tiling_moves_fewer_global_bytes():
    analyzer = StaticAnalyzer(H100)
    naive = analyzer.estimate(naive_gpu_matmul())
    tiled = analyzer.estimate(tiled_gpu_matmul())
    assert naive.valid and tiled.valid
    flops = 2 * 256**3
    naive_bytes, tiled_bytes = naive.features[0].global_read_bytes, tiled.features[0].global_read_bytes
    assert naive_bytes == pytest.approx(flops * 4)  # two 4-byte loads per multiply-add
    # Each block loads a 16-row A slab and a 16-column B slab once: 16x fewer bytes.
    assert tiled_bytes == pytest.approx(naive_bytes / 16)
    assert tiled.features[0].smem_per_block == pytest.approx((16 * 32 + 32 * 16) * 4)
    assert naive.features[0].cuda_core_flops == tiled.features[0].cuda_core_flops == flops


def test_one_block_grid_is_penalised_by_waves():
    analyzer = StaticAnalyzer(H100)
    one = analyzer.estimate(grid_schedule(1))
    full = analyzer.estimate(grid_schedule(H100.sm_count * 8))
    assert one.kernels[0].wave_efficiency < 0.01
    assert full.kernels[0].wave_efficiency > 0.9
    # One SM of 132 does all the work; the full grid is bounded below by DRAM, so the gap is
    # smaller than 132x but still large.
    assert one.latency_s > 15 * full.latency_s


def test_warps_that_leave_a_sub_partition_idle_pay_for_the_busiest_one(tensor_core_candidates):
    """A warp runs on one of an SM's four sub-partitions: six resident warps keep two of them
    twice as busy as the others, so an SM-trip takes as long as with eight, for the tensor cores
    and for the shared-memory instructions each sub-partition queues (the H100 conv2d records: the
    two-warp blocks of 16 fragments a warp, 3 to an SM, measured 32-35 us against 21.6 for the
    four-warp blocks of the same tile)."""
    import dataclasses

    from ms_pruner.analysis.gpu_model import estimate_kernel

    target, schedules = tensor_core_candidates["matmul:1024x1024x1024:float16:float32"]
    features = StaticAnalyzer.for_target(target).estimate(schedules[0].mod).features[0]
    two_warps = dataclasses.replace(features, threads_per_block=64, warps_per_block=2, cuda_core_flops=0.0)
    tensor_total, smem_total = {}, {}  # cycles per block-trip x block-trips: the whole launch's
    for blocks_per_sm in (2, 3, 4):
        grid = H100.sm_count * blocks_per_sm
        kernel = estimate_kernel(dataclasses.replace(two_warps, grid=grid), H100)
        assert kernel.blocks_per_sm >= blocks_per_sm
        tensor_total[blocks_per_sm] = kernel.tensor_cycles * grid
        smem_total[blocks_per_sm] = kernel.smem_cycles * grid
    for total in (tensor_total, smem_total):
        assert total[3] == pytest.approx(total[2] * 4 / 3)
        assert total[4] == pytest.approx(total[2])


def test_over_limit_shared_memory_and_threads_are_invalid():
    big = StaticAnalyzer(H100).estimate(tiled_gpu_matmul(k_tile=256))
    assert big.valid  # 32 KiB fits the opt-in limit
    capped = StaticAnalyzer(H100, max_shared_memory=16 * 1024).estimate(tiled_gpu_matmul(k_tile=256))
    assert not capped.valid and "shared memory" in capped.reason and capped.score == 0.0

    from tvm.s_tir import Schedule
    from tvm import te

    a = te.placeholder((4096,), name="A")
    b = te.compute((4096,), lambda i: a[i] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    outer, inner = sch.split(loop, [None, 2048])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    too_many = StaticAnalyzer(H100).estimate(sch)
    assert not too_many.valid and "2048 threads" in too_many.reason


def test_uncoalesced_copy_is_seen():
    """Copying B into shared with threadIdx.x walking rows touches one sector per thread."""
    sch = tiled_gpu_matmul()
    good = StaticAnalyzer(H100).estimate(sch).features[0].copies
    assert all(c.sector_efficiency == 1.0 for c in good)

    bad_sch = _matmul_schedule()
    block = bad_sch.get_sblock("C")
    i, j, k = bad_sch.get_loops(block)
    i0, i1 = bad_sch.split(i, [None, 16])
    j0, j1 = bad_sch.split(j, [None, 16])
    k0, k1 = bad_sch.split(k, [None, 32])
    bad_sch.reorder(i0, j0, k0, i1, j1, k1)
    bad_sch.bind(bad_sch.fuse(i0, j0), "blockIdx.x")
    cache = bad_sch.cache_read(block, 1, "shared")
    bad_sch.compute_at(cache, k0)
    row, col = bad_sch.get_loops(cache)[-2:]
    bad_sch.reorder(col, row)  # consecutive threads now read consecutive rows of B
    _, tx = bad_sch.split(bad_sch.fuse(col, row), [None, 256])
    bad_sch.bind(tx, "threadIdx.x")
    bad_sch.bind(bad_sch.fuse(i1, j1), "threadIdx.x")
    copies = StaticAnalyzer(H100).estimate(bad_sch).features[0].copies
    assert min(c.sector_efficiency for c in copies) < 0.2


@pytest.mark.parametrize("spec", ["matmul:1024x1024x1024:float16:float32",
                                  "conv2d_nhwc:4x28x28x64x64k3s1p1:float16:float32"])
def test_tensor_core_terms_match_lowered_code(tensor_core_candidates, spec):
    """MMA work equals the workload's FLOPs; shared memory equals what lowering allocates."""
    import tvm
    from tvm.s_tir.analysis import calculate_allocated_bytes
    from tvm.tirx.build import split_host_device_mods

    from ms_pruner.builder import build_pass_config

    target, schedules = tensor_core_candidates[spec]
    analyzer = StaticAnalyzer.for_target(target)
    assert analyzer.hardware.name == "a100"
    for sch in schedules:
        est = analyzer.estimate(sch)
        assert est.valid, est.reason
        kernel = est.features[0]
        assert kernel.mma_flops == pytest.approx(parse_workload(spec).flops)
        assert (kernel.mma_m, kernel.mma_n, kernel.mma_k) == (16, 16, 16)
        with_host = tvm.target.Target(target, host="llvm")
        with tvm.transform.PassContext(config=build_pass_config(target)):
            pipeline = tvm.tirx.get_default_tir_pipeline(with_host)
            pipeline = pipeline[0] if isinstance(pipeline, tuple) else pipeline
            device = split_host_device_mods(pipeline(tvm.tirx.transform.BindTarget(with_host)(sch.mod)))[1]
        allocated = list(calculate_allocated_bytes(list(device.values())[0]).values())[0]
        assert kernel.smem_per_block == pytest.approx(int(allocated["shared.dyn"]), rel=0.05)


@pytest.mark.parametrize("spec", ["matmul:1024x1024x1024:float16:float32",
                                  "conv2d_nhwc:4x28x28x64x64k3s1p1:float16:float32"])
def test_fetch_widths_match_generated_cuda(tensor_core_candidates, spec):
    """The bytes a thread loads per instruction are what code generation emits. A conv2d input tile
    is zero padded: its vectorized fetch becomes scalar predicated loads, which the analyzer sees."""
    from ms_pruner.analysis import operand_fetch_bytes
    from ms_pruner.builder import cuda_sources

    target, schedules = tensor_core_candidates[spec]
    analyzer = StaticAnalyzer.for_target(target)
    scalarized = 0
    for sch in schedules:
        source = cuda_sources(sch.mod, target)[0]
        kernel = source[source.index('extern "C" __global__'):]
        fetch = list(operand_fetch_bytes(analyzer.estimate(sch).features))
        assert fetch == generated_load_bytes(kernel)
        scalarized += "_s = 0;" in kernel
    if spec.startswith("conv2d"):
        assert scalarized > 0  # the sample holds a vectorized padded fetch that codegen scalarized


def test_analyzer_of_a_target_uses_that_part(tensor_core_candidates):
    """An H100 PCIe target (sm_90a like the SXM part, 114 SMs at a lower clock) gets the PCIe figures,
    so the same kernels are estimated slower than on the SXM part."""
    from ms_pruner.hardware import GPUS

    _, schedules = tensor_core_candidates["matmul:1024x1024x1024:float16:float32"]
    sxm, pcie = (StaticAnalyzer.for_target(GPUS[name].target()) for name in ("h100", "h100-pcie"))
    assert (sxm.hardware.name, pcie.hardware.name) == ("h100", "h100-pcie")
    for sch in schedules:
        assert pcie.estimate(sch).latency_s > sxm.estimate(sch).latency_s


def test_cpu_roofline_prefers_parallel_vectorized_code():
    from tvm.s_tir import Schedule

    cpu = StaticAnalyzer("cpu")
    plain = _matmul_schedule(128, 128, 128)
    fast = _matmul_schedule(128, 128, 128)
    i, j, k = fast.get_loops(fast.get_sblock("C"))
    j0, j1 = fast.split(j, [None, 8])
    fast.reorder(i, j0, k, j1)
    fast.parallel(i)
    fast.vectorize(j1)
    slow_est, fast_est = cpu.estimate(plain), cpu.estimate(fast)
    assert slow_est.valid and fast_est.valid
    assert fast_est.cpu.vector_lanes == 8 and fast_est.cpu.parallel_extent == 128
    assert fast_est.latency_s < slow_est.latency_s / 4
    assert isinstance(plain, Schedule)


def _register_tiled_matmul(accumulate_in_registers: bool):
    """128x256x128 fp32 matmul, 64 parallel row pairs, 16-wide vectors: the old roofline tied both orders.

    With the reduction loop inside the 2x16 output tile, C's 32 floats (2 AVX-512 or 4 AVX2
    registers, within C's third of either file) stay in registers over k; with it outside, the
    2x256 band under k (512 floats: more than any register file) is reloaded and stored every k step.
    """
    sch = _matmul_schedule(128, 256, 128)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 2])
    j0, j1 = sch.split(j, [None, 16])
    if accumulate_in_registers:
        sch.reorder(i0, j0, k, i1, j1)
    else:
        sch.reorder(i0, k, j0, i1, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    return sch


def test_index_strides_say_which_loops_move_each_access():
    from ms_pruner.analysis import walk_primfunc

    sch = _matmul_schedule(64, 32, 16)
    program = walk_primfunc(sch.mod["main"], strides=True)
    update = next(b for b in program.blocks if not b.is_init)
    strides = {a.buffer: a.strides for a in update.reads + update.writes}
    assert [loop.extent for loop in update.loops] == [64, 32, 16]
    assert strides == {"C": (32, 1, 0), "A": (16, 0, 1), "B": (0, 1, 32)}
    assert all(a.strides == () for a in walk_primfunc(sch.mod["main"]).blocks[-1].reads)


# The CPU model must not hinge on the host CI lands on: one spec of each SIMD family seen here.
XEON_AVX512 = CPUSpec(name="Intel Xeon (AVX-512)", physical_cores=2, simd_bytes=64, fma_units_per_core=2,
                      clock_ghz=2.6, l1d_bytes=48 * 1024, l2_bytes=2 * 1024 * 1024, l3_bytes=54 * 1024 * 1024,
                      dram_gbps=20.0)
EPYC_AVX2 = CPUSpec(name="AMD EPYC (AVX2)", physical_cores=2, simd_bytes=32, fma_units_per_core=2, clock_ghz=2.45,
                    l1d_bytes=32 * 1024, l2_bytes=512 * 1024, l3_bytes=32 * 1024 * 1024, dram_gbps=20.0)
CPU_SPECS = pytest.mark.parametrize("spec", [XEON_AVX512, EPYC_AVX2], ids=["avx512", "avx2"])


@CPU_SPECS
def test_cpu_model_sees_register_reuse_across_the_reduction(spec):
    """The model's register level, on both SIMD families (a 2x32 tile here once passed on an
    AVX-512 host and failed on an AVX2 one, where 8 registers exceed C's third of 16)."""
    cpu = StaticAnalyzer(spec)
    blocked = cpu.estimate(_register_tiled_matmul(True))
    streaming = cpu.estimate(_register_tiled_matmul(False))
    assert blocked.cpu.compute_s == pytest.approx(streaming.cpu.compute_s)
    assert blocked.cpu.cache_s < streaming.cpu.cache_s / 1.5
    assert blocked.latency_s < streaming.latency_s


@CPU_SPECS
@pytest.mark.slow
def test_cpu_model_orders_pruner_picks_it_used_to_tie(spec):
    """The CPU records PrunerSearch measured (tests/data/cpu_pruner_seed0, on the Xeon): the roofline
    without reuse gave every one of them the same estimate (Spearman 0); the reuse model must order
    them and agree with the measurements, also when it describes another CPU family."""
    import glob
    import os

    from ms_pruner.evaluation import evaluate_database

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "cpu_pruner_seed0")
    dirs = sorted(d for d in glob.glob(os.path.join(root, "*")) if os.path.isdir(d))
    assert len(dirs) == 5
    reports = [evaluate_database(d, cpu=spec) for d in dirs]
    for report in reports:
        predicted = [r.predicted_s for r in report.records if r.predicted_s is not None]
        assert len(predicted) == 64 and len(set(predicted)) > len(predicted) / 2
    assert np.mean([r.spearman for r in reports]) > 0.15


def test_constant_predictor_scores_like_chance():
    measured = np.sort(np.random.default_rng(0).uniform(1, 10, size=200))  # sorted, as MetaSchedule returns
    constant = np.ones_like(measured)
    assert spearman(constant, measured) == 0.0
    assert recall_at_top(constant, measured) == pytest.approx(0.3, abs=0.06)
    assert spearman(measured, measured) == pytest.approx(1.0)
    assert recall_at_top(measured, measured) == 1.0
    assert recall_at_top(-measured, measured) == 0.0


def test_address_divisions_count_what_each_element_recomputes():
    """Divisions by non-powers of two that read the copy's own loop are per element; the rest is
    hoisted out of the copy loop, and a power of two is a shift."""
    from tvm import tirx as T

    from ms_pruner.analysis.access import _key
    from ms_pruner.analysis.index_cost import _collect_divisions

    def divisions(expr, own):
        found = set()
        _collect_divisions(expr, {_key(own)}, found, {})
        return len(found)

    own, tile = T.Var("ax0", "int32"), T.Var("by", "int32")
    row = T.FloorDiv(own * 32, 48)
    index = T.FloorMod(T.FloorDiv(tile * 256 + row, 56) + T.FloorDiv(own * 32, 48), 3136)
    assert divisions(index, own) == 3  # // 48 (once, written twice), // 56, % 3136
    assert divisions(T.FloorDiv(tile * 256, 56) + own, own) == 0
    assert divisions(T.FloorMod(own * 32, 64), own) == 0


def test_bounded_memory_keeps_its_last_capacity_values():
    """Whatever was asked for among the last ``capacity`` lookups comes back without computing, and
    the memory never holds more than twice its capacity."""
    from ms_pruner.analysis.memory import BoundedMemory

    memory, computed = BoundedMemory(8), []

    def value_of(key):
        return memory.get(key, lambda: computed.append(key) or key * 10)

    order = [k % 13 for k in range(0, 200, 7)] + list(range(30))
    for step, key in enumerate(order):
        recent = set(order[max(0, step - 8):step])
        before = len(computed)
        assert value_of(key) == key * 10
        if key in recent:
            assert len(computed) == before, (step, key)
        assert len(memory) <= 16
    assert memory.computed == len(computed) < memory.asked == len(order)


def test_analyzers_of_one_setting_share_their_analyses(tensor_core_candidates):
    """Two analyzers of the same GPU and limits, given one memory, analyze a program once and return
    that analysis to both (by the program's structural hash, whatever object carries it); an
    analyzer of other limits analyzes it anew, and every answer equals an unremembered one."""
    from tvm.s_tir.schedule import Schedule

    from ms_pruner.analysis.memory import BoundedMemory

    memory = BoundedMemory(64)
    sch = tensor_core_candidates["matmul:1024x1024x1024:float16:float32"][1][0]
    first = StaticAnalyzer(get_gpu_spec("a100"), memory=memory)
    second = StaticAnalyzer(get_gpu_spec("a100"), memory=memory)
    tighter = StaticAnalyzer(get_gpu_spec("a100"), max_shared_memory=1024, memory=memory)
    copy = Schedule(sch.mod)  # another object, the same program
    analysis = first.analyze(sch)
    assert second.analyze(copy.mod) is analysis and second.estimate(sch) is analysis[1]
    assert memory.computed == 1 and memory.asked == 3
    assert tighter.estimate(sch) is not analysis[1] and memory.computed == 2
    plain = StaticAnalyzer(get_gpu_spec("a100"))
    assert plain.estimate(sch) == analysis[1] and plain.estimate(sch) is not analysis[1]
    assert tighter.estimate(sch).valid is False and analysis[1].valid
