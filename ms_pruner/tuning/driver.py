"""One call that tunes a TIR workload with a chosen strategy, our builder, timing and resume."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import sys
import time
from typing import List, Mapping, Optional, Sequence, Union

from tqdm import tqdm
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.tune_context import _normalize_mod
from tvm.tirx import PrimFunc

from ..analysis import StaticAnalyzer
from ..builder import close_builder, make_builder, make_runner, run_cubin_cache, start_builder_workers
from ..cost_model import PSACostModel
from ..cost_model.pacm import MOA_MOMENTUM, PaCM, pretrained_momentum
from ..database import sole_writer
from ..database.records import best_record, mean_latency, open_database, records_for, workload_flops
from ..database.transfer import require_sources, tuned_records
from ..errors import UserError, require_positive, require_seed
from ..search import PrunerSearch, pruner_configs
from ..space import tensor_instruction, tuning_space
from .fleet import Tracker, make_fleet_runner
from .instrument import ProgressCallback, RoundClock, TimedBuilder, TimedRunner, batch_seconds
from .interrupt import graceful_interrupts, stop_unless_time_for
from .resume import ROUND_LOG, resume_point, warmed_cost_model, workload_tag

STRATEGIES = ("stock", "pruner", "moa", "replay")
PRUNER_STRATEGIES = ("pruner", "moa")  # PrunerSearch's, with its first-round policy
COST_MODELS = (None, "xgb", "pacm", "analyzer")  # None: each strategy's own (stock XGB, Pruner PaCM)


@dataclasses.dataclass
class TuneResult:
    """What a tuning call did and where the work dir stands afterwards."""

    work_dir: str
    strategy: str
    records: int
    new_trials: int
    best_latency_s: Optional[float]
    flops: float
    wall_s: float
    rounds: List[dict]
    warmed_on: int = 0  # records the cost model learned before this call's first round (a resumed run)
    space: str = "none"  # the design space searched (ms_pruner.space: wmma, mma, all; none off tensor cores)
    target: str = ""  # the target tuned for, as the records hold it (a space may raise its shared memory)
    best_instruction: Optional[str] = None  # the best's: wmma, m16n8k8 or m16n8k16; None off tensor cores

    @property
    def best_tflops(self) -> Optional[float]:
        return self.flops / self.best_latency_s / 1e12 if self.best_latency_s else None


def check_search(strategy: str, pretrained: Optional[str] = None, seed: Optional[int] = None,
                 cost_model: Optional[str] = None, first_round: bool = True, warm_start: Sequence[str] = (),
                 pruner_settings: Optional[Mapping[str, object]] = None) -> None:
    """The choices ``search_components`` takes, checked before anything is created or tuned: an
    unknown name or setting, a seed the generators refuse, or MoA without a model is one UserError line."""
    if strategy not in STRATEGIES:
        raise UserError(f"unknown strategy '{strategy}'; choose one of {', '.join(STRATEGIES)}")
    if cost_model not in COST_MODELS:
        raise UserError(f"unknown cost model '{cost_model}'; choose {', '.join(COST_MODELS[1:])}")
    require_seed(seed)
    if strategy == "moa" and not pretrained:
        raise UserError("--strategy moa needs --pretrained MODEL (make one with 'ms-pruner train')")
    if strategy in PRUNER_STRATEGIES and cost_model == "xgb":
        raise UserError(f"--strategy {strategy} verifies with PaCM; drop --cost-model xgb")
    if strategy == "moa" and cost_model == "analyzer":
        raise UserError("--strategy moa verifies with its pretrained PaCM; use --strategy pruner --cost-model analyzer")
    if not first_round and strategy not in PRUNER_STRATEGIES:
        raise UserError(f"--no-first-round switches off Pruner's first-round policy; --strategy {strategy} has none")
    if warm_start and strategy not in PRUNER_STRATEGIES:
        raise UserError(f"--warm-start leads Pruner's first round; --strategy {strategy} has none")
    if pruner_settings and strategy not in PRUNER_STRATEGIES:
        raise UserError(f"--set changes PrunerSearch's settings; --strategy {strategy} has none")
    pruner_configs(pruner_settings, first_round)
    for path in warm_start:
        tuned_records(path)  # a missing or corrupt database is one line now, not inside the search


def search_components(strategy: str, target, pretrained: Optional[str] = None, seed: Optional[int] = None,
                      cost_model: Optional[str] = None, first_round: bool = True, warm_start: Sequence[str] = (),
                      pruner_settings: Optional[Mapping[str, object]] = None):
    """(search strategy, cost model) for MetaSchedule, by strategy name.

    ``stock`` is MetaSchedule's evolutionary search with its XGB model (or PaCM with
    ``cost_model="pacm"``; a ``pretrained`` file then starts it MoA-style). ``pruner`` and ``moa``
    are the draft-then-verify search with PaCM; ``moa`` needs a pretrained model.
    ``cost_model="analyzer"`` scores with the static analyzer alone, which never learns (for
    ``pruner``: the verify stage's ablation). ``replay`` is
    MetaSchedule's ReplayTrace (random schedules), for collecting unbiased measurement sets.
    ``first_round=False`` runs Pruner without its tensor-core first-round policy (an ablation);
    ``warm_start`` (work dirs) leads its first round with other workloads' records adapted;
    ``pruner_settings`` (``--set``) sets fields of its PrunerConfig and FirstRoundConfig by name.
    """
    check_search(strategy, pretrained, seed, cost_model, first_round, warm_start, pruner_settings)
    if strategy == "replay":  # uniform random candidates: for measuring datasets, not for tuning
        return "replay-trace", "random"
    model = _cost_model(strategy, target, pretrained, cost_model, seed or 0)
    if strategy == "stock":
        return "evolutionary", model

    config, first_round_config = pruner_configs(pruner_settings, first_round)
    return PrunerSearch(config, first_round_config, seed=seed or 0, warm_start=warm_start), model


def _cost_model(strategy: str, target, pretrained: Optional[str], cost_model: Optional[str], seed: int):
    """The model a strategy tunes with: the analyzer alone for ``analyzer``; stock's XGB unless PaCM
    is asked for (a pretrained file starts it MoA-style); PaCM for Pruner (MoA-adapted for ``moa``)."""
    if cost_model == "analyzer":
        return PSACostModel(StaticAnalyzer.for_target(target))
    if strategy == "stock":
        if cost_model == "pacm" or pretrained:
            return PaCM(pretrained=pretrained, momentum=pretrained_momentum(pretrained), seed=seed)
        return "xgb"
    return PaCM(pretrained=pretrained, momentum=MOA_MOMENTUM if strategy == "moa" else None, seed=seed)


def import_model_dependencies(model) -> None:
    """Import now what ``model`` (a cost model or its name) would import on its first update.

    PaCM's first update boosts trees with xgboost (the transformer residual constructs torch's Adam,
    which imports torch's compiler hooks) and ranks with scipy.stats; MetaSchedule's XGB model
    imports xgboost. Imports are process start-up, which the round clock leaves out for every
    strategy alike, not round 0's work (docs/search.md).
    """
    modules = []
    if isinstance(model, str):
        modules = ["xgboost"] if model == "xgb" else []
    elif isinstance(model, PaCM):
        modules = ["scipy.stats", "torch._dynamo", "xgboost"]
    for name in modules:
        importlib.import_module(name)


@contextlib.contextmanager
def metaschedule_logging_guard():
    """Detach foreign handlers from MetaSchedule's logger while ``ms.tune_tir`` configures it, and
    point its console at stderr.

    ``ms.tune_tir`` rebuilds its logging config from the names of the handlers already on the
    ``tvm.s_tir.meta_schedule`` logger, which only works for handlers its own config created; an
    unnamed or foreign one (pytest's capture handler, a user's handler) crashes it. They are put
    back afterwards. Its console handler writes to whatever ``sys.stdout`` is when it is configured,
    and stays on the logger after the call (a later RPCRunner logs through it): made while stdout is
    stderr, it leaves stdout to the results (``tune --json`` prints one JSON object and nothing else).
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    foreign = [h for h in logger.handlers if not (h.get_name() or "").startswith("tvm.s_tir.meta_schedule")]
    for handler in foreign:
        logger.removeHandler(handler)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for handler in foreign:
            logger.addHandler(handler)


@contextlib.contextmanager
def instrumented_session(work_dir: str, total_trials: int, strategy_obj, builder, runner, desc: str,
                         progress: bool, resume=None, workload: Optional[str] = None, call: Optional[int] = None,
                         cost_model=None):
    """Yields (clock, kwargs for ms.tune_*): timed builder and runner, progress callback, round log.

    ``resume`` (a ResumePoint) continues an earlier call's round log; ``workload`` tags the
    round lines with the tuned workload (resume.workload_tag); ``call`` labels them with the
    caller's count of calls (tune_tir). ``cost_model``'s imports are made before the clock starts
    (import_model_dependencies), and a builder made here from its name starts its kept workers
    before it too. The session holds the run's shared cubin folder (builder.run_cubin_cache: that
    builder's workers take what the search compiled). The progress bar closes, the logging guard
    lifts, that builder's workers stop and the folder goes however the tuning call ends.
    """
    import_model_dependencies(cost_model)
    # Builder and runner first: the runner starts a worker process to check its functions, our
    # builder its kept workers (seconds, the same for every strategy), process start-up like the
    # imports before it, which no clock counts.
    with run_cubin_cache():
        owned = isinstance(builder, str)
        builder = make_builder(builder) if owned else builder
        with _builder_and_bar(builder, owned, total_trials, desc, progress) as bar:
            runner = runner if runner is not None else make_runner()
            clock = RoundClock(log_path=os.path.join(work_dir, ROUND_LOG), progress=bar, total_trials=total_trials,
                               strategy_timings=getattr(strategy_obj, "timings", None), resume=resume,
                               workload=workload, call=call)
            measure = {
                "builder": TimedBuilder(builder, clock),
                "runner": TimedRunner(runner, clock),
                "measure_callbacks": ms.MeasureCallback.create("default") + [ProgressCallback(clock)],
            }
            with metaschedule_logging_guard(), graceful_interrupts():
                yield clock, measure


@contextlib.contextmanager
def _builder_and_bar(builder, owned: bool, total_trials: int, desc: str, progress: bool):
    """The builder's kept workers started and a progress bar open for the ``with``; the bar closed and,
    where the session made the builder (``owned``), its workers stopped however it ends."""
    bar = None
    try:
        start_builder_workers(builder)
        bar = tqdm(total=total_trials, unit="trial", desc=desc, disable=not progress)
        yield bar
    finally:
        if bar is not None:
            bar.close()
        if owned:
            close_builder(builder)


def normalized_mod(mod):
    """The single-function IRModule MetaSchedule stores as the workload of a PrimFunc, or of an
    IRModule's one PrimFunc (``ms.tune_tir`` tunes each PrimFunc of a module as one of its own)."""
    if isinstance(mod, IRModule):
        functions = [func for func in mod.functions.values() if isinstance(func, PrimFunc)]
        if len(functions) != 1:
            raise UserError(f"tune_tir tunes one PrimFunc; this IRModule holds {len(functions)} "
                            "(a whole model: tune_relax)")
        mod = functions[0]
    return _normalize_mod(mod)


def tune_tir(mod, target, work_dir: str, max_trials: int, strategy: str = "stock", *, builder="pruner",
             runner=None, seed: Optional[int] = None, num_trials_per_iter: int = 64, pretrained: Optional[str] = None,
             progress: bool = True, search=None, cost_model: Optional[str] = None, call: Optional[int] = None,
             space: str = "auto", first_round: bool = True, rpc: Union[str, Tracker, None] = None,
             warm_start: Sequence[str] = (), pruner_settings: Optional[Mapping[str, object]] = None) -> TuneResult:
    """Tune ``mod`` until the work dir holds ``max_trials`` records of it for ``target``.

    ``max_trials`` counts the records already there: a rerun resumes (round log, clock, and the
    cost model learning the earlier records: resume.py). ``builder``: "pruner", "stock" or a Builder;
    ``search``: a (strategy, cost model) pair instead of the one ``strategy`` names; ``call``: which
    call of a run made in pieces this is, for the round log (compare counts its own). ``space``: the
    tensor-core rule families (ms_pruner.space; with mma, the GPU's opt-in shared memory a block).
    ``first_round=False``: Pruner without its first-round policy. ``rpc``: a tracker's ``HOST:PORT:KEY``
    whose servers measure (``""``: the ``TVM_TRACKER_*`` variables), or a fleet.Tracker (with its
    ``timeout_s``). ``warm_start``: work dirs whose records of other workloads of this operator kind
    lead Pruner's first round.
    ``pruner_settings``: PrunerConfig / FirstRoundConfig fields by name (``{"eps_greedy": 0}``)."""
    require_positive("--trials", max_trials)
    require_positive("--per-iter", num_trials_per_iter)
    if search is None:
        check_search(strategy, pretrained, seed, cost_model, first_round, warm_start, pruner_settings)
    else:
        require_seed(seed)
    workload = normalized_mod(mod)
    resolved, target, generator = tuning_space(space, workload, target)
    require_sources(warm_start, [workload], target)
    if rpc is not None and runner is None:
        runner = make_fleet_runner(Tracker.of(rpc), target)
    with sole_writer(work_dir, f"tune {strategy}"):  # writer_lock.py: a second writer is refused here
        database = open_database(work_dir, create=True)
        existing = records_for(database, workload, target)
        remaining = max_trials - len(existing)
        started = time.perf_counter()
        tag = workload_tag(workload)
        resume = resume_point(os.path.join(work_dir, ROUND_LOG), existing, tag)
        rounds, warmed_on = (list(resume.rounds) if resume else []), 0
        if remaining > 0:
            strategy_obj, model = search or search_components(strategy, target, pretrained, seed, cost_model,
                                                              first_round, warm_start, pruner_settings)
            with instrumented_session(work_dir, remaining, strategy_obj, builder, runner, f"tuning ({strategy})",
                                      progress, resume, tag, call, cost_model=model) as (clock, measure):
                # No round starts that would end past a time limit (interrupt.py): a resumed run
                # knows its rounds, a new one those this process measured for earlier runs.
                stop_unless_time_for(max(batch_seconds(resume.rounds), default=0.0) if resume else 0.0)
                if resume is not None:
                    model, warmed_on = warmed_cost_model(model, workload, target, existing)
                ms.tune_tir(mod=workload, target=target, work_dir=work_dir, max_trials_global=remaining,
                            num_trials_per_iter=min(num_trials_per_iter, remaining), database=database,
                            cost_model=model, strategy=strategy_obj, space=generator, seed=seed, **measure)
            rounds += [dataclasses.asdict(r) for r in clock.rounds]
        records = records_for(database, workload, target)
        best = best_record(records)
        best_s, instruction = (mean_latency(best), tensor_instruction(best.trace)) if best is not None else (None, None)
        return TuneResult(work_dir=work_dir, strategy=strategy, records=len(records),
                          new_trials=len(records) - len(existing), best_latency_s=best_s,
                          flops=workload_flops(workload), wall_s=time.perf_counter() - started, rounds=rounds,
                          warmed_on=warmed_on, space=resolved, target=str(target), best_instruction=instruction)
