"""A tiling carried between the mma family's two instructions (search/first_round/transplant.py)."""

import collections
import random

from ms_pruner.search.first_round.transplant import instruction_k, k_split
from ms_pruner.workloads import parse_workload


def test_a_k_split_keeps_each_fragment_loops_k_elements_where_the_instruction_allows():
    assert k_split([64, 4, 2], 8, 16, 4) == [64, 4, 1]  # 2 x k8 = 1 x k16: same trips, same tile
    assert k_split([16, 4, 4], 8, 16, 4) == [16, 4, 2]
    assert k_split([64, 4, 1], 8, 16, 4) == [32, 4, 1]  # one k8 step has no k16 twin: the outer factors halve
    assert k_split([64, 1, 4], 16, 8, 4) == [128, 1, 4]  # 4 x k16 = 8 x k8, over the innermost limit of 4
    assert k_split([32, 2, 2], 16, 8, 0) == [32, 2, 4]
    assert k_split([3], 8, 16) is None  # 24 elements: no whole number of k16 steps


def test_an_mma_tiling_moves_to_the_other_instructions_sketch_with_its_geometry(tensor_intrinsics):
    """Every sampled tiling of either instruction, replayed on the other's sketch of its pipeline
    depth, keeps its M and N splits and, where its fragment loop keeps its k elements (an even
    number of k8 steps; at most 4 k8 steps, the split's innermost limit), its whole kernel geometry:
    grid, threads, fragments, trips and operand tiles."""
    import tvm

    from ms_pruner.analysis import StaticAnalyzer, kernel_geometry
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.transplant import transplanted
    from ms_pruner.space import mma_shape, pipeline_depth, tuning_space

    mod = tvm.IRModule({"main": parse_workload("matmul:1024x1024x1024:float16:float32").prim_func()})
    _, target, generator = tuning_space("mma", mod, get_gpu_spec("h100").target())
    space, analyzer = DesignSpace(mod, target, space=generator), StaticAnalyzer.for_target(target)
    moved = collections.Counter()
    for sample in space.sample(12, seed=3):
        source = sample.trace.simplified(remove_postproc=True)
        traces = transplanted(source, space.sketches)
        assert traces and all(mma_shape(t) not in (None, mma_shape(source)) for t in traces)
        for sch in space.replay_valid(traces, random.Random(0)):
            assert mma_shape(sch.trace) != mma_shape(source) and pipeline_depth(sch.trace) == pipeline_depth(source)
            new = sch.trace.simplified(remove_postproc=True)
            splits = [[[int(x) for x in t.decisions[i]] for i in t.insts if i.kind.name == "SamplePartitionedTile"]
                      for t in (source, new)]
            assert splits[0] == splits[1]
            k = [next(int(d[-1]) for i, d in t.decisions.items() if i.kind.name == "SamplePerfectTile")
                 for t in (source, new)]
            if k[0] * instruction_k(mma_shape(source)) == k[1] * instruction_k(mma_shape(sch.trace)):
                geometries = [kernel_geometry(analyzer.estimate(s).features) for s in (sample, sch)]
                assert [g[:5] for g in geometries[0]] == [g[:5] for g in geometries[1]]
                moved[mma_shape(source)] += 1
    assert set(moved) == {"m16n8k8", "m16n8k16"}, moved


def test_a_trace_off_the_mma_family_has_no_transplant(tensor_intrinsics):
    import tvm

    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.first_round.transplant import transplanted
    from ms_pruner.space import tuning_space

    mod = tvm.IRModule({"main": parse_workload("matmul:1024x1024x1024:float16:float32").prim_func()})
    _, target, generator = tuning_space("all", mod, get_gpu_spec("h100").target())
    space = DesignSpace(mod, target, space=generator)
    wmma = [s for s in space.sketches if "wmma" in str(s)]
    assert wmma and all(transplanted(s, space.sketches) == [] for s in wmma)

