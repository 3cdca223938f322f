"""Candidates that lower to a kernel already measured (search/same_kernel.py), on real H100 records."""

import hashlib

import pytest

H100_CONV2D = "conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32"


@pytest.mark.slow
def test_schedules_an_unroll_depth_apart_that_compile_alike_are_told_apart_before_measuring(
        h100_runs, tensor_intrinsics):
    """The H100 Pruner conv2d run of 2026-11-26, first 96 records in measurement order: each is
    asked ``repeats`` against those before it, and the answer is held against its generated CUDA
    (same source, same kernel). 8 of them repeated a kernel (docs/results/h100/same_kernels.json.gz: 34 of 256)."""
    from ms_pruner.database import replay_record
    from ms_pruner.builder import cuda_sources
    from ms_pruner.search.same_kernel import SameKernels, unroll_free_decisions
    from ms_pruner.database.records import records_in_file_order

    records = records_in_file_order(h100_runs(H100_CONV2D, "pruner"))[:96]
    check = SameKernels(records[0].target)
    seen, repeated, dropped = {}, [], []
    for index, record in enumerate(records):
        sch = replay_record(record)
        digest = hashlib.sha256(cuda_sources(sch.mod, record.target)[0].encode()).hexdigest()
        if digest in seen:
            repeated.append(index)
            # the twin differs in its unroll draw alone
            assert unroll_free_decisions(records[seen[digest]].trace) == unroll_free_decisions(record.trace)
        seen.setdefault(digest, index)
        check.new_batch()
        if check.repeats(sch):
            dropped.append(index)
        check.note_measured(record.trace, sch.mod)
    assert dropped == repeated and len(repeated) == 8
    assert check.repeated == 8 and 8 < check.lowered < 96  # only candidates with a twin's decisions are lowered
