"""Transfer-tuning: traces tuned for one shape adapt to another of the same operator kind."""

import json
import os
import random

import pytest

from conftest import H100_MM4096, REPO_ROOT, needs_h100_data, needs_nvcc
from ms_pruner.cli import main
from ms_pruner.database.records import mean_latency, records_in_file_order
from ms_pruner.database.transfer import operator_signature, refactor
from ms_pruner.search import warm_best_source, warm_start_line
from ms_pruner.workloads import parse_workload

TUNED = os.path.join(REPO_ROOT, "tests", "data", "cpu_pruner_seed0")  # real CPU records, 64 a workload


def test_refactoring_a_split_always_gives_a_valid_one():
    rng = random.Random(0)
    for _ in range(2000):
        factors = [rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 32, 64]) for _ in range(rng.randint(2, 5))]
        extent = rng.choice([1, 7, 16, 49, 56, 64, 96, 100, 128, 1000, 3136, 4096])
        cap = rng.choice([0, 16, 64])
        new = refactor(factors, extent, cap)
        product = 1
        for factor in new:
            product *= factor
        assert product == extent and len(new) == len(factors) and min(new) >= 1
        assert cap == 0 or new[-1] <= cap
    assert refactor([2, 2, 4, 8], 256, 64) == [4, 2, 4, 8]  # the inner factors kept where they divide


def test_the_operator_signature_tells_kinds_apart_not_shapes():
    signature = lambda spec: operator_signature(parse_workload(spec).prim_func())  # noqa: E731
    assert signature("matmul:128x128x128:float32:float32") == signature("matmul:256x64x512:float32:float32")
    assert signature("matmul:128x128x128:float32:float32") != signature("matmul_nt:128x128x128:float32:float32")
    assert signature("matmul:128x128x128:float32:float32") != signature("matmul:128x128x128:float16:float32")
    assert signature("conv2d_nhwc:1x14x14x32x32k3s1p1:float32:float32") == \
        signature("conv2d_nhwc:1x28x28x32x64k3s2p1:float32:float32")


@pytest.mark.parametrize("source, new", [
    ("matmul_128x128x128_float32_float32", "matmul:256x64x512:float32:float32"),
    ("conv2d_nhwc_1x14x14x32x32k3s1p1_float32_float32", "conv2d_nhwc:1x28x28x32x64k3s1p1:float32:float32"),
])
def test_tuned_traces_adapt_to_another_shape_and_replay_valid(source, new):
    from ms_pruner.database.transfer import adapting_provider, on_new_sketch, source_records
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.space import PerSchedule

    space = DesignSpace(parse_workload(new).prim_func(), llvm_target())
    records = source_records([os.path.join(TUNED, source)], space.mod, llvm_target(), per_workload=8)
    assert len(records) == 8 and records[0].latency_s <= records[-1].latency_s
    adapted = [space.replay(on_new_sketch(r.trace, space.sketches), 1, decision_provider=PerSchedule(adapting_provider))
               for r in records]
    assert all(sch is not None for sch in adapted)
    for record, sch in zip(records, adapted):  # each split re-factored from the tuned one, the rest kept
        tuned, new = (_decisions(trace) for trace in (record.trace, sch.trace))
        assert [kind for kind, _, _ in tuned] == [kind for kind, _, _ in new]
        for (kind, old, attrs), (_, got, _) in zip(tuned, new):
            if kind == "SamplePerfectTile":
                extent = 1
                for factor in got:
                    extent *= factor
                assert got == refactor(old, extent, attrs), (old, got)
            else:
                assert got == old


def _decisions(trace):
    """(kind, decision, max innermost factor) of each sampling instruction, in order."""
    out = []
    for inst in trace.insts:
        if inst.kind.name.startswith("Sample") and inst in trace.decisions:
            decision = trace.decisions[inst]
            value = [int(d) for d in decision] if inst.kind.name == "SamplePerfectTile" else str(decision)
            out.append((inst.kind.name, value, int(inst.attrs[1]) if inst.kind.name == "SamplePerfectTile" else 0))
    return out


@pytest.mark.slow
def test_a_warm_start_leads_the_first_round_with_adapted_records(tmp_path, capsys):
    work_dir = str(tmp_path / "wd")
    assert main(["tune", "matmul:256x64x512:float32:float32", "--target", "llvm", "--trials", "8", "--per-iter", "8",
                 "--seed", "0", "--work-dir", work_dir, "--no-progress", "--warm-start",
                 os.path.join(TUNED, "matmul_128x128x128_float32_float32")]) == 0
    out = capsys.readouterr().out
    assert "8 records (8 new)" in out
    (timing,) = [json.loads(line) for line in open(os.path.join(work_dir, "logs", "ms_pruner_rounds.jsonl"))]
    first = timing["strategy"]
    assert first["warm_adapted"] == first["warm_valid"] == 8 and first["warm_picked"] == 2
    assert all(source.startswith(TUNED) for source in first["warm_sources"])
    assert all(source.endswith(" of C(128x128:float32, 128x128:float32, 128x128:float32)")
               for source in first["warm_sources"])  # the source workload, as db list names it
    latencies = [mean_latency(record) for record in records_in_file_order(work_dir)]
    assert latencies[timing["batch_best"]] == min(latencies)
    source = warm_best_source(timing)
    assert source == (first["warm_sources"][timing["batch_best"]] if timing["batch_best"] < 2 else None)
    said = f"adapted from {source}" if source else "from the draft"
    assert f"warm start: 8 adapted, 8 valid, 2 measured, the round's best {said}" in out


def test_a_warm_start_refuses_what_it_cannot_use_in_one_line(tmp_path, capsys):
    spec = "matmul:64x64x64:float32:float32"
    assert main(["tune", spec, "--target", "llvm", "--warm-start", str(tmp_path / "none"),
                 "--work-dir", str(tmp_path / "wd")]) == 2
    assert "no MetaSchedule database" in capsys.readouterr().err
    assert main(["tune", spec, "--target", "llvm", "--strategy", "stock", "--warm-start", TUNED,
                 "--work-dir", str(tmp_path / "wd")]) == 2
    assert "--warm-start leads Pruner's first round; --strategy stock has none" in capsys.readouterr().err
    assert main(["tune", "conv2d_nhwc:1x7x7x16x16k3s1p1:float32:float32", "--target", "llvm", "--warm-start",
                 os.path.join(TUNED, "matmul_128x128x128_float32_float32"), "--work-dir", str(tmp_path / "wd")]) == 2
    assert "--warm-start: no record of this operator kind for this target in" in capsys.readouterr().err
    assert not (tmp_path / "wd").exists()


@pytest.mark.slow
def test_db_merge_keeps_each_records_target_and_says_so_and_best_keeps_one_a_workload(tmp_path, capsys, h100_runs):
    cpu = os.path.join(TUNED, "matmul_128x128x128_float32_float32")
    gpu = h100_runs("matmul_4096x4096x4096_float16_float32", "stock")
    merged, best = str(tmp_path / "merged"), str(tmp_path / "best")
    assert main(["db", "merge", cpu, gpu, "--out", merged]) == 0
    assert capsys.readouterr().out.strip() == (f"wrote 320 records into {merged}: 256 for cuda sm_90a, 64 for llvm; "
                                               "2 targets, each record keeping its own")
    assert main(["db", "best", merged, "--out", best]) == 0
    assert main(["db", "list", best]) == 0
    out = capsys.readouterr().out
    assert "C(128x128:float32, 128x128:float32, 128x128:float32) on llvm: 1 records (1 valid), best 117.3 us" in out
    assert "C(4096x4096:float16, 4096x4096:float16, 4096x4096:float32) on cuda sm_90a: 1 records (1 valid)" in out
    assert main(["db", "merge", str(tmp_path / "none"), "--out", str(tmp_path / "never")]) == 2
    assert "no MetaSchedule database" in capsys.readouterr().err and not (tmp_path / "never").exists()
    (tmp_path / "a_file").write_text("")
    assert main(["db", "merge", cpu, "--out", str(tmp_path / "a_file" / "merged")]) == 2
    assert "cannot make the database folder" in capsys.readouterr().err
    assert main(["db", "list", best, str(tmp_path / "none")]) == 2  # the bad path alone, nothing listed before it
    said = capsys.readouterr()
    assert said.out == "" and len(said.err.strip().splitlines()) == 1 and "no MetaSchedule database" in said.err


def _as_metaschedule_reads(path):
    """(record, schedule) a line, as MetaSchedule's TuningRecord.from_json reads it, then replayed."""
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.database import replay_record
    from ms_pruner.database.lines import database_paths

    workload_file, record_file = database_paths(path)
    with open(workload_file, encoding="utf-8") as handle:
        workloads = [ms.database.Workload.from_json(json.loads(line)) for line in handle if line.strip()]
    with open(record_file, encoding="utf-8") as handle:
        records = [ms.database.TuningRecord.from_json(payload, workloads[index])
                   for index, payload in map(json.loads, filter(str.strip, handle))]
    return [(record, replay_record(record)) for record in records]


def _show_replays_a_trace_with_the_intrinsics_it_needs(cpu_run, tensor_core_run, tensor_core_records):
    """``show`` in a new process: a CPU run's best replays without the tensor intrinsics (seconds to
    register), a tensor-core run's registers them and says what TVM's own records say."""
    import subprocess
    import sys

    from ms_pruner.database.records import describe_best

    program = ("import sys\nfrom ms_pruner.cli import main\n"
               f"assert main(['show', '--work-dir', {cpu_run!r}]) == 0\n"
               "print('registered', 'tvm.s_tir.tensor_intrin' in sys.modules)\n"
               f"assert main(['show', '--work-dir', {tensor_core_run!r}]) == 0\n"
               "print('registered', 'tvm.s_tir.tensor_intrin' in sys.modules)\n")
    shown = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    lines = shown.strip().splitlines()
    assert lines[0].startswith("64 records (64 valid); best 117.3 us") and lines[1] == "registered False"
    assert lines[2:] == [describe_best(tensor_core_records), "registered True"]


@pytest.mark.parametrize("source", ["cpu", "tensor_core"])
def test_records_read_in_file_order_with_their_schedules_as_metaschedule_reads_them(tmp_path, source, capsys):
    """Each record's trace is replayed once; what comes back is what TVM's own reading gives, in file
    order, for CPU traces and for WMMA traces (index maps, tensor intrinsics)."""
    import tvm_ffi

    from ms_pruner.database import replayed_in_file_order
    from ms_pruner.database.tools import list_database

    if source == "cpu":
        path = os.path.join(TUNED, "matmul_128x128x128_float32_float32")
    elif os.path.isdir(H100_MM4096):
        path = str(tmp_path / "first16")
        os.makedirs(path)
        for name in ("database_workload.json", "database_tuning_record.json"):
            with open(os.path.join(H100_MM4096, name), encoding="utf-8") as handle:
                lines = handle.readlines()[:16]
            with open(os.path.join(path, name), "w", encoding="utf-8") as handle:
                handle.writelines(lines)
    else:
        pytest.skip("the shared H100 databases are not here")
    got, expected = replayed_in_file_order(path), _as_metaschedule_reads(path)
    assert len(got) == len(expected) == (64 if source == "cpu" else 16)
    for (record, sch), (their_record, their_sch) in zip(got, expected):
        assert str(record.trace) == str(their_record.trace) and str(record.target) == str(their_record.target)
        assert [float(s) for s in record.run_secs] == [float(s) for s in their_record.run_secs]
        assert [str(a.as_json()) for a in record.args_info] == [str(a.as_json()) for a in their_record.args_info]
        assert tvm_ffi.structural_equal(sch.mod, their_sch.mod)
    assert [mean_latency(r) for r in records_in_file_order(path)] == [mean_latency(r) for r, _ in expected]
    listed = list_database(path)  # read with no trace replayed
    valid = [mean_latency(r) for r, _ in expected if mean_latency(r) < 1e9]
    assert [(row.records, row.valid, row.best_s) for row in listed] == [(len(expected), len(valid), min(valid))]
    if source == "tensor_core":
        _show_replays_a_trace_with_the_intrinsics_it_needs(os.path.join(TUNED, "matmul_128x128x128_float32_float32"),
                                                           path, [r for r, _ in expected])
        # The copy's last line cut short, as a kill leaves it.
        record_file = os.path.join(path, "database_tuning_record.json")
        lines = open(record_file, encoding="utf-8").readlines()
        with open(record_file, "w", encoding="utf-8") as handle:
            handle.writelines(lines[:-1] + [lines[-1][:len(lines[-1]) // 2]])
        assert main(["db", "merge", path, "--out", str(tmp_path / "merged")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"ms-pruner: error: corrupt MetaSchedule database in '{path}': "
                              "database_tuning_record.json line 16 of 16: cut short or not JSON") and "\n" not in err
        assert not (tmp_path / "merged").exists()


@needs_h100_data
@pytest.mark.slow
def test_a_record_seeds_only_the_rule_family_it_was_tuned_in_and_computes_the_new_gemm():
    """The shared H100 database's WMMA records adapt to another fp16 GEMM on the WMMA space, where
    their kernels compute that GEMM (emulated), and are left out of an mma-only run of it (round log:
    ``warm_other_family``), not measured there."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.emulator import EmulatedChecker
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.candidates import CandidateFacts
    from ms_pruner.search.warm_start import WarmStart
    from ms_pruner.space import sketch_family, tuning_space

    workload = parse_workload("matmul:2048x2048x1024:float16:float32")
    mod = workload.prim_func()
    stats, emulated = {}, []
    for choice in ("wmma", "mma"):
        _, target, generator = tuning_space(choice, mod, get_gpu_spec("h100").target())
        space = DesignSpace(mod, target, space=generator)
        warm = WarmStart([H100_MM4096], per_workload=4)
        warm.prepare(space, CandidateFacts(StaticAnalyzer.for_target(target)), seed=0)
        stats[choice] = dict(warm.stats, families={sketch_family(sch.trace) for sch, _ in warm.ranked})
        emulated += [EmulatedChecker(workload, target).check(sch.mod).status for sch, _ in warm.ranked]
    assert stats["wmma"]["warm_adapted"] == 4 and stats["wmma"]["warm_other_family"] == 0
    assert stats["wmma"]["warm_valid"] >= 1 and stats["wmma"]["families"] == {"wmma"}
    assert stats["mma"] == {"warm_adapted": 0, "warm_valid": 0, "warm_other_family": 4, "families": set()}
    assert emulated == ["right"] * stats["wmma"]["warm_valid"]


@needs_nvcc
@pytest.mark.slow
def test_tensor_core_conv2d_records_adapt_to_another_resnet_stage_build_and_compute_it(h100_runs):
    """A tensor-core conv2d trace carries im2col layout transforms written for its own shapes, so it
    does not replay on another stage as it is; moved onto the new workload's sketch built the same
    way (on_new_sketch), the committed H100 run's best records adapt, replay valid, build, and their
    kernels compute the new stage's convolution (emulated: the im2col indices are the new shape's)."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from ms_pruner.builder import close_builder, make_builder
    from ms_pruner.database.transfer import adapting_provider, on_new_sketch, source_records
    from ms_pruner.emulator import EmulatedChecker
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.space import PerSchedule
    from ms_pruner.space import tuning_space

    workload = parse_workload("conv2d_nhwc:16x28x28x128x128k3s1p1:float16:float32")
    mod = workload.prim_func()
    _, target, generator = tuning_space("wmma", mod, get_gpu_spec("h100").target())
    space = DesignSpace(mod, target, space=generator)
    records = source_records([h100_runs("conv2d_nhwc_16x56x56x64x64k3s1p1_float16_float32", "pruner")],
                             space.mod, target, per_workload=4)
    provider = PerSchedule(adapting_provider)
    assert [space.replay(r.trace, 1, decision_provider=provider) for r in records] == [None] * 4
    adapted = [space.replay(on_new_sketch(r.trace, space.sketches), 1, decision_provider=provider) for r in records]
    assert all(sch is not None for sch in adapted)
    builder = make_builder("pruner", max_workers=2)
    try:
        built = builder.build([BuilderInput(sch.mod, target) for sch in adapted])
    finally:
        close_builder(builder)
    assert [b.error_msg for b in built] == [None] * 4
    checker = EmulatedChecker(workload, target)
    assert [checker.check(sch.mod).status for sch in adapted] == ["right"] * 4


def test_a_task_without_a_source_starts_cold_and_only_no_source_at_all_is_refused():
    """A model's tasks (tune-model --warm-start) share one list of databases: a task of an operator
    kind none holds starts cold, and the call is refused in one line only when no task has a source."""
    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.database.transfer import require_sources
    from ms_pruner.errors import UserError
    from ms_pruner.hardware import llvm_target
    from ms_pruner.search import DesignSpace
    from ms_pruner.search.candidates import CandidateFacts
    from ms_pruner.search.warm_start import WarmStart

    source = [os.path.join(TUNED, "matmul_128x128x128_float32_float32")]
    matmul, conv = (parse_workload(spec).prim_func() for spec in
                    ("matmul:64x32x64:float32:float32", "conv2d_nhwc:1x7x7x16x16k3s1p1:float32:float32"))
    require_sources(source, [conv, matmul], llvm_target())
    with pytest.raises(UserError, match="no record of this operator kind for this target"):
        require_sources(source, [conv], llvm_target())
    space = DesignSpace(conv, llvm_target())
    warm = WarmStart(source)
    warm.prepare(space, CandidateFacts(StaticAnalyzer.for_target(llvm_target())), seed=0)
    assert warm.ranked == [] and warm.stats == {"warm_adapted": 0, "warm_valid": 0, "warm_other_family": 0}


def test_the_round_line_says_where_a_warm_rounds_best_came_from():
    stats = {"warm_adapted": 8, "warm_valid": 6, "warm_picked": 2, "warm_sources": ["a#0", "a#3"]}
    line = {place: warm_start_line({"strategy": stats, "batch_best": place}) for place in (None, 1, 2)}
    assert line[1].endswith("2 measured, the round's best adapted from a#3") and warm_best_source(
        {"strategy": stats, "batch_best": 1}) == "a#3"
    assert line[2].endswith("the round's best from the draft") and line[None].endswith("none ran")
    assert warm_start_line({"strategy": {"round": 3}, "batch_best": 0}) == ""
