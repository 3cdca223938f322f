"""The screened sampler (search/screen.py) on a real tensor-core design space for the H100 target."""

import random

import pytest

from ms_pruner.workloads import parse_workload


def _space(spec="matmul:1024x1024x1024:float16:float32"):
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace

    target = get_gpu_spec("h100").target()
    mod = parse_workload(spec).prim_func()
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=2)
    analyzer = StaticAnalyzer.for_target(target)
    return DesignSpace(mod, target, context=context), analyzer, (1024, analyzer.max_shared_memory)


def test_screened_sampler_replays_only_draws_verify_gpu_code_may_pass(tensor_intrinsics):
    """After learning from its first replays, the sampler drops most draws unreplayed, and every
    draw it drops breaks a VerifyGPUCode limit (each replayed here through all postprocessors);
    the draws it keeps are valid far more often than draws at large. What it returns is distinct
    and post-processed (tensorized)."""
    import tvm_ffi

    from ms_pruner.search.screen import ScreenedSampler

    space, analyzer, limits = _space()
    sampler = ScreenedSampler(space, analyzer, limits)
    assert sampler.supported and all(s.extents == [64, 64, 64] for s in sampler.sketches)
    found = sampler.sample(24, random.Random(0))
    assert len({int(tvm_ffi.structural_hash(s.mod)) for s in found}) == len(found) == 24
    assert all(any(i.kind.name == "Tensorize" for i in s.trace.insts) for s in found)
    stats = sampler.stats
    assert stats["screened"] > stats["replayed"] > stats["valid"] >= 24 and stats["false_rejections"] == 0

    rng = random.Random(1)
    draws = []
    for _ in range(240):
        sketch = sampler.sketches[rng.randrange(len(sampler.sketches))]
        decisions = sampler.draw(sketch, rng)
        draws.append((sketch, decisions, sketch.exceeds(sketch.features(decisions), limits)))
    from tvm.s_tir.schedule import Trace

    valid = [space.replay(Trace(sketch.trace.insts, decisions), seed=i + 1) is not None
             for i, (sketch, decisions, _) in enumerate(draws)]
    dropped = [ok for (_, _, out), ok in zip(draws, valid) if out]
    kept = [ok for (_, _, out), ok in zip(draws, valid) if not out]
    assert len(dropped) > len(draws) / 2 and not any(dropped), "only invalid draws are dropped"
    assert sum(kept) / len(kept) > 2 * sum(valid) / len(valid)

    # A trace from elsewhere (a mutation, a climb move) is screened by its sketch's fit, its sampling
    # instructions matched by position: as the draw was, and never a schedule the fit learned was valid.
    assert [sampler.screens(Trace(sketch.trace.insts, decisions)) for sketch, decisions, _ in draws] == \
        [out for _, _, out in draws]
    assert [sampler.screens(s.trace.simplified(remove_postproc=True)) for s in found] == [False] * len(found)


def test_sketches_with_other_decisions_are_left_to_metaschedules_sampler():
    """The llvm conv2d's sketches sample a compute location (the padding's), which the screen does
    not draw: unsupported, so MetaSchedule's own sampler serves it. A CPU target has no VerifyGPUCode
    to screen against anyway: PrunerSearch makes no sampler for it."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.screen import ScreenedSampler

    target = llvm_target()
    mod = parse_workload("conv2d_nhwc:1x14x14x32x32k3s1p1:float32:float32").prim_func()
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=1)
    space = DesignSpace(mod, target, context=context)
    assert any(i.kind.name == "SampleComputeLocation" for s in space.sketches for i in s.insts)
    assert not ScreenedSampler(space, StaticAnalyzer.for_target(target), (1024, 49152)).supported

    from ms_pruner.search import PrunerSearch

    strategy = PrunerSearch(seed=0)
    ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy, num_threads=1)
    assert strategy.sampler is None and not strategy.settings.screen_samples and strategy.settings.cold_samples == 50


@pytest.mark.slow
def test_a_space_of_a_few_schedules_is_found_exhausted_without_drawing_its_whole_budget():
    """A model's cast has a few distinct schedules: with ``saturation`` the sampler stops once that
    many valid draws in a row brought nothing new (and says so: ``exhausted``), finding what the
    whole budget of 40 draws a schedule asked finds; a large space never looks exhausted."""
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.screen import ScreenedSampler
    from ms_pruner.search.candidates import structural_key

    target = get_gpu_spec("h100").target()
    x = te.placeholder((4096, 64), "float32", "x")
    mod = te.create_prim_func([x, te.compute((4096, 64), lambda i, j: x[i, j].astype("float16"), "cast")])
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=2)
    space, analyzer = DesignSpace(mod, target, context=context), StaticAnalyzer.for_target(target)
    limits = (1024, analyzer.max_shared_memory)
    whole = ScreenedSampler(space, analyzer, limits)
    everything = whole.sample(16, random.Random(0))
    saturating = ScreenedSampler(space, analyzer, limits, saturation=64)
    found = saturating.sample(16, random.Random(0))
    assert whole.supported and whole.stats["drawn"] == 40 * 16 + 40 and not whole.exhausted
    assert 0 < len(found) < 16 and saturating.exhausted and saturating.stats["drawn"] < whole.stats["drawn"] / 4
    assert {structural_key(s.mod) for s in found} == {structural_key(s.mod) for s in everything}

    gemm, gemm_analyzer, gemm_limits = _space()
    sampler = ScreenedSampler(gemm, gemm_analyzer, gemm_limits, saturation=64)
    assert len(sampler.sample(24, random.Random(0))) == 24 and not sampler.exhausted
