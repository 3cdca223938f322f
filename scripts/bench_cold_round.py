"""What round 0 of PrunerSearch would measure on the H100 matmul, by the analyzer's estimate, no GPU.

    python scripts/bench_cold_round.py --seeds 0,1,2 --drafts 5x512,3x384^8 --out cold_round.json

Round 0 has no measurements: the analyzer alone chooses its picks (an untrained PaCM ranks as the
analyzer does). For ``matmul 4096^3 fp16->fp32`` on ``nvidia/nvidia-h100`` (the workload of the
real H100 database) this generates one cold round per draft configuration (generations x
population, parent selection power) and reports the analyzer's estimates of its picks (on a GPU
the cold round measures half of a 64-trial batch, the follow-up round the rest around what it
measured; ``--set cold_batch_share=1`` draws the whole batch cold, as before that split), their
block-tile families (grid, threads, accumulator fragments per warp, main-loop trips), and, for
scale, the estimate of the database's measured best schedule and the families the database
measured. Estimates are not measurements: this shows where the draft goes, not how fast that is.

    python scripts/bench_cold_round.py --workload conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32 --gpu h100

does the same for a workload without a measured database; the scale is then the analyzer's
estimates of ``--random`` uniform samples of the design space (what a round with no guidance
would measure).

With ``--db`` and ``--target-us``, each run also reads its picks against the databases' records:
by shape (geometry and fetch widths: ``shape_hit_odds``) and, one level finer, by how each pick's
warp loops its fragments (``arrangement_hit_odds``, docs/analyzer.md, section 3).

    python scripts/bench_cold_round.py --workload dense_bias:2048x3072x768:float16:float32 --space all \
        --drafts 1x384^8 --emulate

runs every pick's kernels on the CPU emulator against the workload's exact result (docs/emulator.md):
what a GPU would measure first, the climb's reshaped tiles included, checked before it does.
``--model bert-layer [--tasks REGEX]`` does that for each task ``tune-model`` extracts from the model,
each held against its own unscheduled function run on the CPU.
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (H100_MM4096, add_workload_arguments, divides_in_output_address, emulated_picks,  # noqa: E402
                     parse_params, pick_register_checks, provenance, pruner_search, searched_source, resolved_space,
                     tune_context, workload_and_target, write_json)


def _family(estimate) -> str:
    f = estimate.features[0]
    return f"grid {int(f.grid)} x {int(f.threads_per_block)} thr, {int(f.acc_fragments_per_warp)} acc frags, " \
           f"{int(f.main_loop_trips)} trips"


def _draft(spec: str):
    """``5x512^4`` -> (5 generations, population 512, selection power 4.0); the power defaults to 1."""
    sizes, _, power = spec.partition("^")
    generations, population = (int(n) for n in sizes.split("x"))
    return generations, population, float(power or 1.0)


def cold_round(mod, target, generations: int, population: int, power: float, seed: int, threads: int,
               per_iter: int, analyzer, params: dict, ptxas: bool = False, space=None,
               emulated_workload=None) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from ms_pruner.analysis import (geometry_name, has_narrow_fetch, kernel_geometry, operand_fetch_bytes,
                                    summarize_register_checks)
    from ms_pruner.cost_model import PaCM
    from ms_pruner.search import tile_decisions
    from ms_pruner.space import sketch_family, tensor_instruction

    strategy = pruner_search(seed, dict(params, cold_genetic_iters=generations, cold_population=population,
                                        cold_selection_power=power))
    context = tune_context(mod, target, strategy, seed, threads, space)
    context.pre_tuning(max_trials=4 * per_iter, num_trials_per_iter=per_iter,
                       design_spaces=context.generate_design_space(), database=ms.database.MemoryDatabase(),
                       cost_model=PaCM(seed=seed))
    start = time.perf_counter()
    picks = context.search_strategy.generate_measure_candidates()
    seconds = time.perf_counter() - start
    estimates = [analyzer.estimate(c.sch) for c in picks]
    families = collections.Counter(_family(e) for e in estimates)
    ties = collections.Counter(f"{e.latency_s:.6g}" for e in estimates)
    pick_geometries = [kernel_geometry(e.features) for e in estimates]
    pick_families = [str(sketch_family(c.sch.trace)) for c in picks]
    pick_instructions = [str(tensor_instruction(c.sch.trace)) for c in picks]
    geometries = collections.Counter(pick_geometries)
    checks = pick_register_checks(picks, estimates, target, analyzer) if ptxas else [None] * len(picks)
    shapes = collections.defaultdict(list)
    for pick, e, geometry, check in zip(picks, estimates, pick_geometries, checks):
        shapes[geometry_name(geometry), operand_fetch_bytes(e.features)].append(
            (e.latency_s * 1e6, check, warp_arrangement(pick.sch.trace)))
    return {"generations": generations, "population": population, "selection_power": power, "seed": seed,
            "params": params,
            "search_s": seconds, "split": strategy.timings[-1],
            "picks_estimate_us": sorted(e.latency_s * 1e6 for e in estimates), "families": dict(families),
            "picks_with_narrow_copies": sum(has_narrow_fetch(e.features) for e in estimates),
            "picks_dividing_in_output_address": sum(divides_in_output_address(c.sch.mod, target) for c in picks),
            "most_picks_sharing_an_estimate": max(ties.values()),
            "geometries": len(geometries), "most_picks_sharing_a_geometry": max(geometries.values()),
            "geometries_by_family": _geometries_by_family(pick_families, pick_geometries),
            "best_estimate_us_by_family": _best_estimate_by(pick_families, estimates),
            "picks_by_instruction": dict(collections.Counter(pick_instructions)),
            "best_estimate_us_by_instruction": _best_estimate_by(pick_instructions, estimates),
            "distinct_tilings": len({tile_decisions(c.sch.trace) for c in picks}),
            "picks_by_shape": sorted((_shape_row(g, f, v) for (g, f), v in shapes.items()),
                                     key=lambda x: x["best_estimate_us"]),
            **({"ptxas": summarize_register_checks(checks)} if ptxas else {}),
            **({"emulated": emulated_picks(picks, pick_instructions, emulated_workload, target)}
               if emulated_workload else {})}


def _geometries_by_family(families, geometries) -> dict:
    """For each rule family among the picks (``space.sketch_family`` of each), its picks per kernel
    geometry, most first."""
    counts = collections.defaultdict(collections.Counter)
    for name, geometry in zip(families, geometries):
        counts[name][geometry] += 1
    return {name: sorted(c.values(), reverse=True) for name, c in counts.items()}


def _best_estimate_by(names, estimates) -> dict:
    """For each rule family (or instruction) named among the picks, its best pick's estimate in us:
    the family floor's picks are only as good as what the draft and the climb reached of that family."""
    best = {}
    for name, estimate in zip(names, estimates):
        best[name] = min(best.get(name, float("inf")), estimate.latency_s * 1e6)
    return best


def _shape_key(geometry: str, fetch) -> str:
    return f"{geometry} | {'/'.join(map(str, fetch))} B"


def shape_hit_odds(shapes: list, hits_by_shape: dict) -> dict:
    """What the database's records of each pick's shape say about round 0 reaching the target: picks
    of a shape it measured, the expected number at or below the target if each pick fares as that
    shape's records did, and the chance of at least one (shapes it never measured count as misses)."""
    measured = expected = 0.0
    miss = 1.0
    for shape in shapes:
        row = hits_by_shape.get(_shape_key(shape["geometry"], shape["fetch_bytes"]))
        if row:
            rate = row["at_or_below_target"] / row["records"]
            measured += shape["picks"]
            expected += shape["picks"] * rate
            miss *= (1.0 - rate) ** shape["picks"]
    return {"picks_in_measured_shapes": int(measured), "expected_picks_at_target": round(expected, 3),
            "chance_of_a_pick_at_target": round(1.0 - miss, 3)}


def warp_arrangement(trace):
    """How a tensor-core tiling loops its warp's fragments (``search.first_round.arrangement``, as the search reads
    it), or None for a trace without five-level spatial splits."""
    from ms_pruner.search.first_round.arrangement import arrangement_name, fragment_arrangement

    return arrangement_name(fragment_arrangement(trace)) or None


def arrangement_hit_odds(shapes: list, hits_by_shape: dict, hits_by_arrangement: dict, prior: float) -> dict:
    """``shape_hit_odds`` one level finer: each pick fares as the records of its shape *and* warp
    arrangement did, their rate drawn toward the shape's by ``prior`` pseudo-records (a cell of one
    record would otherwise count as a certain hit or a certain miss); arrangements the databases
    never measured in that shape fare as the shape."""
    expected, miss = 0.0, 1.0
    for shape in shapes:
        key = _shape_key(shape["geometry"], shape["fetch_bytes"])
        row = hits_by_shape.get(key)
        if not row:
            continue
        base = row["at_or_below_target"] / row["records"]
        for name, picks in shape.get("arrangements", {}).items():
            cell = hits_by_arrangement.get(f"{key} | {name}", {"records": 0, "at_or_below_target": 0})
            rate = (cell["at_or_below_target"] + prior * base) / (cell["records"] + prior)
            expected += picks * rate
            miss *= (1.0 - rate) ** picks
    return {"arrangement_prior": prior, "expected_picks_at_target_by_arrangement": round(expected, 3),
            "chance_of_a_pick_at_target_by_arrangement": round(1.0 - miss, 3)}


def _shape_row(geometry: str, fetch: tuple, picks: list) -> dict:
    row = {"geometry": geometry, "fetch_bytes": list(fetch), "picks": len(picks),
           "best_estimate_us": min(us for us, _, _ in picks),
           "arrangements": dict(collections.Counter(a for _, _, a in picks if a is not None))}
    checks = [c for _, c, _ in picks if c is not None]
    if checks:
        row["regs_estimate"] = checks[0].regs_estimate
        row["regs_ptxas"] = [min(c.regs_ptxas for c in checks), max(c.regs_ptxas for c in checks)]
        row["spilling_picks"] = sum(c.spill_ptxas for c in checks)
        row["blocks_per_sm"] = sorted({(c.blocks_per_sm_estimate, c.blocks_per_sm_ptxas) for c in checks})
        floors = [c.issue_floor_s * 1e6 for c in checks if c.issue_floor_s is not None]
        if floors:  # the SASS was read: a lone warp's main loop and the floor it sets (docs/compiled.md)
            row["issue_floor_us"] = [min(floors), max(floors)]
            row["warp_trip_cycles"] = sorted({c.warp_trip_cycles for c in checks if c.warp_trip_cycles is not None})
        by_arrangement = collections.defaultdict(list)
        for _, check, name in picks:
            if check is not None and name is not None:
                by_arrangement[name].append(check.regs_ptxas)
        row["regs_ptxas_by_arrangement"] = {name: sorted(regs) for name, regs in sorted(by_arrangement.items())}
    return row


def target_hits(measured, arrangements, target_us: float) -> dict:
    """How many records of each pick shape (geometry and operand fetch widths), and of each shape in
    each warp arrangement, measured at or below ``target_us``."""
    import numpy as np

    from ms_pruner.analysis import geometry_name, kernel_geometry, operand_fetch_bytes

    shapes, cells = collections.defaultdict(list), collections.defaultdict(list)
    for (lat, est), name in zip(measured, arrangements):
        if est.valid and np.isfinite(lat):
            key = _shape_key(geometry_name(kernel_geometry(est.features)), operand_fetch_bytes(est.features))
            shapes[key].append((lat * 1e6, est.latency_s * 1e6))
            if name is not None:
                cells[f"{key} | {name}"].append((lat * 1e6, est.latency_s * 1e6))

    def hits(groups) -> dict:
        return {key: {"records": len(rows), "at_or_below_target": int(sum(us <= target_us for us, _ in rows)),
                      "best_us": min(rows)[0], "median_us": float(np.median([us for us, _ in rows])),
                      "best_estimate_us": min(e for _, e in rows)}
                for key, rows in sorted(groups.items(), key=lambda kv: min(kv[1])[0])}

    return {"target_us": target_us, "hits_by_shape": hits(shapes), "hits_by_arrangement": hits(cells)}


def database_reference(paths, analyzer, target_us=None) -> dict:
    """The measured best's estimate and family, and every measured family's latencies, over the
    records of every database in ``paths``; with ``target_us``, how many records of each pick shape
    (geometry and operand fetch widths) measured at or below it (``hits_by_shape``)."""
    import numpy as np

    from ms_pruner.evaluation.model_ranking import load_measured
    from ms_pruner.analysis import geometry_name, has_narrow_fetch, kernel_geometry, operand_fetch_bytes

    measured, arrangements = [], []
    for path in paths:
        _, schedules, latency = load_measured(path)
        measured.extend((lat, analyzer.estimate(s)) for lat, s in zip(latency, schedules))
        arrangements.extend(warp_arrangement(s.trace) for s in schedules)
    best_latency, best_estimate = min(measured, key=lambda m: m[0])
    best_family = _family(best_estimate)
    measured_families, by_fetch, by_geometry, by_width = (collections.defaultdict(list) for _ in range(4))
    for lat, est in measured:
        family = _family(est)
        measured_families[family].append(lat * 1e6)
        if family == best_family:
            by_fetch[",".join(map(str, operand_fetch_bytes(est.features)))].append((lat * 1e6, est.latency_s * 1e6))
        geometry = kernel_geometry(est.features)
        by_geometry[geometry].append((est.latency_s * 1e6, lat * 1e6))
        by_width[geometry, has_narrow_fetch(est.features)].append((lat * 1e6, est.latency_s * 1e6))
    geometries = sorted(by_geometry.items(), key=lambda item: min(item[1]))
    reference = {"best_measured_us": best_latency * 1e6, "best_estimate_us": best_estimate.latency_s * 1e6,
                 "best_family": best_family,
                 "measured_families": {k: {"records": len(v), "min_us": min(v), "median_us": float(np.median(v))}
                                       for k, v in measured_families.items()},
                 "fetch_widths_in_best_family": {
                     k: {"records": len(v), "min_us": min(v)[0], "its_estimate_us": min(v)[1]}
                     for k, v in sorted(by_fetch.items())},
                 "best_measured_by_geometry": {geometry_name(k): min(m for _, m in v) for k, v in geometries},
                 "geometries_by_best_estimate": [
                     {"geometry": geometry_name(k), "records": len(v), "best_estimate_us": min(v)[0],
                      "best_measured_us": min(m for _, m in v)} for k, v in geometries[:12]],
                 # Geometries measured with both narrow (<= 4 B) and wide operand fetches: what widening
                 # a pick of that geometry would have changed, best against best.
                 "narrow_vs_wide_by_geometry": sorted((
                     {"geometry": geometry_name(k), "wide_records": len(wide), "narrow_records": len(narrow),
                      "best_wide_us": min(wide)[0], "best_narrow_us": min(narrow)[0],
                      "its_estimates_us": [min(wide)[1], min(narrow)[1]]}
                     for k in by_geometry for wide, narrow in [(by_width[k, False], by_width[k, True])]
                     if wide and narrow), key=lambda g: g["best_wide_us"])}
    if target_us is not None:
        reference.update(target_hits(measured, arrangements, target_us))
    print(f"database best {reference['best_measured_us']:.1f} us measured, {reference['best_estimate_us']:.1f} us "
          f"estimated ({reference['best_family']})")
    return reference


def random_reference(mod, target, count: int, analyzer, threads: int, space=None) -> dict:
    """The analyzer's estimates of ``count`` random samples of the design space, drawn by
    MetaSchedule's C++ sampler (postprocessors applied), as round 0 of stock starts from."""
    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    strategy = ms.search_strategy.EvolutionarySearch(population_size=count, init_min_unmeasured=count)
    context = tune_context(mod, target, strategy, 0, threads, space)
    context.pre_tuning(max_trials=count, num_trials_per_iter=count, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=ms.CostModel.create("random"))
    sample = ms._ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation  # pylint: disable=protected-access
    start = time.perf_counter()
    schedules = list(sample(context.search_strategy, count))
    seconds = time.perf_counter() - start
    estimates = [analyzer.estimate(s) for s in schedules]
    valid = np.array(sorted(e.latency_s * 1e6 for e in estimates if np.isfinite(e.latency_s)))
    reference = {"random_samples": len(estimates), "random_valid": int(valid.size), "sample_s": seconds,
                 "random_estimate_us": {"min": float(valid.min()), "p10": float(np.percentile(valid, 10)),
                                        "median": float(np.median(valid))} if valid.size else None,
                 "random_families": len({_family(e) for e in estimates})}
    print(f"{len(estimates)} random samples in {seconds:.1f} s: estimates {reference['random_estimate_us']}",
          flush=True)
    return reference


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", default=None,
                        help="measured database(s) of the workload (default: the shared H100 4096^3 one); the "
                             "first gives the workload and target, the reference is over all of them")
    parser.add_argument("--target-us", type=float, default=None,
                        help="with --db: a latency to reach (stock's final best, say); each run then reports how "
                             "its picks' shapes fared against it in the databases (shape_hit_odds)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--drafts", default="5x512,3x384^8",
                        help="cold-round drafts to compare, GENERATIONSxPOPULATION[^SELECTION_POWER], comma-separated")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--per-iter", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None,
                        help="sampler threads (default: this machine's builder workers); MetaSchedule's sampler "
                             "draws differently with another count, and ms.tune_tir samples with one thread per "
                             "physical core, so give the GPU host's count to draw rounds like its "
                             "(8 and 16 both did for the first H100 host, whose physical count was not recorded)")
    parser.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                        help="another PrunerSearch parameter for every run (docs/search.md), e.g. "
                             "categorical_mutate_prob=0")
    add_workload_arguments(parser)
    parser.add_argument("--random", type=int, default=128, help="random samples for --workload's scale")
    parser.add_argument("--arrangement-prior", type=float, default=2.0,
                        help="with --target-us: pseudo-records that draw a (shape, warp arrangement) cell's hit "
                             "rate toward its shape's (arrangement_hit_odds)")
    parser.add_argument("--ptxas", action="store_true",
                        help="compile every pick with nvcc and hold the analyzer's registers against ptxas's")
    parser.add_argument("--emulate", action="store_true",
                        help="with --workload: run every pick's kernels on the CPU emulator against the exact result")
    parser.add_argument("--model", default=None,
                        help="instead of --workload: a cold round, its picks emulated, for each task tune-model "
                             "extracts from this model (ms_pruner.models) for --gpu, on --space (default auto)")
    parser.add_argument("--tasks", default="", help="with --model: only the tasks whose names match this regex")
    args = parser.parse_args()
    if args.emulate and not args.workload:
        parser.error("--emulate needs --workload (the emulator computes that workload's exact result)")
    return args


def model_rounds(args: argparse.Namespace) -> int:
    """``--model``: what tune-model's first round on each of the model's tasks would measure, each
    pick's kernels emulated against the unscheduled task run on the CPU (``PrimFuncWorkload``);
    tasks without random-input checks (an index computed from an integer input, several outputs,
    non-finite results) say why."""
    import re

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder import default_max_workers
    from ms_pruner.emulator import PrimFuncWorkload
    from ms_pruner.errors import UserError
    from ms_pruner.hardware import get_gpu_spec
    from ms_pruner.models import extract_tasks, get_model, import_torch_model
    from ms_pruner.space import tuning_space

    module, example, spec = get_model(args.model)
    relax_mod = import_torch_model(module, example, nhwc=spec.nhwc, mixed_precision=spec.dtype == "float16")
    tasks = [t for t in extract_tasks(relax_mod, get_gpu_spec(args.gpu).target()) if re.search(args.tasks, t.task_name)]
    space, target, _ = tuning_space(args.space or "auto", [t.dispatched[0] for t in tasks], tasks[0].target)
    analyzer, threads, params, rounds = StaticAnalyzer.for_target(target), args.threads or default_max_workers(), \
        parse_params(args.set), {}
    for task in tasks:
        mod = task.dispatched[0]
        try:
            workload = PrimFuncWorkload(mod["main"], task.task_name)
            workload.reference(workload.random_inputs(1))
        except UserError as err:
            rounds[task.task_name] = {"refused": str(err)}
            print(f"{task.task_name}: {err}", flush=True)
            continue
        for seed in (int(s) for s in args.seeds.split(",")):
            for generations, population, power in map(_draft, args.drafts.split(",")):
                run = cold_round(mod, target, generations, population, power, seed, threads, args.per_iter, analyzer,
                                 params, space=space, emulated_workload=workload)
                rounds.setdefault(task.task_name, {"runs": []})["runs"].append(run)
                print(f"{task.task_name}, seed {seed}: picks {run['picks_by_instruction']}, "
                      f"emulated {run['emulated']['by_instruction']}", flush=True)
    if args.out:
        write_json(args.out, dict(provenance(), model=args.model, target=str(target), space=space, tasks=rounds))
    return 0


def _against_reference(run: dict, reference: dict, args: argparse.Namespace) -> str:
    """Adds to a cold round's run how its picks stand against the reference (the measured database's
    best and hit rates, or the random samples' best estimate) and says it in one clause."""
    import numpy as np

    picks = np.array(run["picks_estimate_us"])
    if "best_estimate_us" not in reference:
        scale = reference["random_estimate_us"]
        run["picks_below_random_min"] = int((picks < scale["min"]).sum()) if scale else 0
        return f"{run['picks_below_random_min']} below the best random sample's estimate"
    run["picks_below_best_estimate"] = int((picks < reference["best_estimate_us"]).sum())
    run["picks_in_best_family"] = run["families"].get(reference["best_family"], 0)
    for shape in run["picks_by_shape"]:  # how the database measured that geometry, if it did
        shape["db_best_measured_us"] = reference["best_measured_by_geometry"].get(shape["geometry"])
    versus = (f"{run['picks_below_best_estimate']} below the measured best's estimate; "
              f"{run['picks_in_best_family']} in its family")
    if "hits_by_shape" in reference:
        run.update(shape_hit_odds(run["picks_by_shape"], reference["hits_by_shape"]))
        run.update(arrangement_hit_odds(run["picks_by_shape"], reference["hits_by_shape"],
                                        reference["hits_by_arrangement"], args.arrangement_prior))
        versus += (f"; {run['expected_picks_at_target']} picks expected at {args.target_us:g} us "
                   f"(chance of one {run['chance_of_a_pick_at_target']}; by warp arrangement "
                   f"{run['expected_picks_at_target_by_arrangement']}, "
                   f"{run['chance_of_a_pick_at_target_by_arrangement']})")
    return versus


def main() -> int:
    args = _arguments()
    import numpy as np
    from ms_pruner.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics()  # the database's traces name the wmma intrinsics
    if args.model:
        return model_rounds(args)

    from ms_pruner.analysis import StaticAnalyzer
    from ms_pruner.builder import default_max_workers
    from ms_pruner.workloads import parse_workload

    if args.workload:
        mod, target, space = workload_and_target(args)
        analyzer = StaticAnalyzer.for_target(target)
        reference = random_reference(mod, target, args.random, analyzer, default_max_workers(), space)
    else:
        from ms_pruner.tuning import open_database, records_for

        args.db = args.db or [H100_MM4096]
        record = records_for(open_database(args.db[0]))[0]
        mod = record.workload.mod
        target, space = resolved_space(args, mod, record.target)
        analyzer = StaticAnalyzer.for_target(target)
        reference = database_reference(args.db, analyzer, args.target_us)
    params = parse_params(args.set)
    threads = args.threads or default_max_workers()
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for generations, population, power in map(_draft, args.drafts.split(",")):
            run = cold_round(mod, target, generations, population, power, seed, threads, args.per_iter,
                             analyzer, params, ptxas=args.ptxas, space=space,
                             emulated_workload=parse_workload(args.workload) if args.emulate else None)
            picks = np.array(run["picks_estimate_us"])
            versus = _against_reference(run, reference, args)
            print(f"seed {seed}, {generations} generations of {population}, selection power {power:g}: "
                  f"{run['search_s']:.1f} s; pick estimates min {picks.min():.1f}, "
                  f"median {np.median(picks):.1f} us, {len(run['families'])} families, "
                  f"{run['distinct_tilings']} tilings, {run['picks_with_narrow_copies']} with narrow copies, at most "
                  f"{run['most_picks_sharing_an_estimate']} sharing an estimate, {run['geometries']} geometries "
                  f"(at most {run['most_picks_sharing_a_geometry']} picks in one); {versus}", flush=True)
            for key in ("ptxas", "emulated"):
                if key in run:
                    print(f"  {key}: {run[key]}", flush=True)
            runs.append(run)
    if args.out:
        write_json(args.out, dict(provenance(), **searched_source(args, target),
                                  reference=reference, runs=runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
