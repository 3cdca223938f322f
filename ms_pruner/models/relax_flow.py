"""Whole models through Relax: torch.export -> Relax -> tasks -> tune_relax -> VM executable.

Relay (and ``ms.tune_relay``) left TVM in 0.20; ``ms.relax_integration.tune_relax`` over a Relax
IRModule replaces it. ``tune_relax`` here passes our strategy, cost model and builder to it,
then compiles with the tuned database into a runnable VM executable.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from ..builder import exported, target_device_type, with_device_code
from ..database import sole_writer
from ..database.records import group_by_workload, is_valid, open_database, same_target, structural_key
from ..database.transfer import require_sources
from ..errors import UserError, require_positive
from ..hardware import resolve_target
from ..intrinsics import register_tensor_intrinsics
from ..space import tuning_space
from ..tuning.driver import check_search, instrumented_session, search_components
from ..tuning.fleet import Tracker, make_fleet_runner
from ..tuning.instrument import batch_seconds
from ..tuning.interrupt import stop_unless_time_for
from ..tuning.resume import ROUND_LOG, resume_point, warmed_cost_model
from .compile import compile_tuned
from .user_model import example_inputs


def import_torch_model(module, example, nhwc: bool = False, mixed_precision: bool = False):
    """A Relax IRModule of ``module`` traced on ``example`` (a tensor or a tuple; weights bound as constants).

    ``mixed_precision`` runs Relax's ToMixedPrecision: fp16 matmul/conv operands with fp32
    accumulation. (Importing a torch module already in fp16 trips a dtype mismatch in TVM 0.27's
    frontend: its linear decomposition adds an fp16 bias to an fp32 product.)
    """
    import torch  # lazy: torch only for importing a torch model
    from tvm.relax.frontend.torch import from_exported_program  # lazy: (the same)

    with torch.no_grad():
        exported = torch.export.export(module, example_inputs(example))
    return prepared_relax(from_exported_program(exported, keep_params_as_input=False), nhwc, mixed_precision)


def prepared_relax(mod, nhwc: bool = False, mixed_precision: bool = False):
    """``mod`` with its convolutions in NHWC (the tensor-core layout) and mixed precision, as asked."""
    if nhwc:
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    if mixed_precision:
        mod = relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    return mod


def legalize_and_fuse(mod):
    """The prefix ``tune_relax`` needs: TIR for every op, fused into tunable functions."""
    return tvm.transform.Sequential([
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ])(mod)


def extract_tasks(mod, target) -> List:
    register_tensor_intrinsics()
    return ms.relax_integration.extract_tasks(legalize_and_fuse(mod), target)


@dataclasses.dataclass
class RelaxTuneResult:
    executable: object
    database: object
    tasks: List[str]
    task_weights: List[float]
    rounds: List[dict]
    trials: int  # the budget: ``max_trials_global``, or a round for each task where it was None
    task_records: List[int]  # each task's valid records in the database (0: compiled with a default schedule)


def tasks_reached(n_tasks: int, max_trials_global: int, num_trials_per_iter: int) -> int:
    """How many tasks a call's budget reaches at least: MetaSchedule's task scheduler gives each
    task one round of up to ``num_trials_per_iter`` trials, in task order, before any task gets a
    second, and stops where the global budget ends (a task whose space holds fewer candidates than a
    round takes fewer, so more tasks may be reached)."""
    return min(n_tasks, math.ceil(max_trials_global / num_trials_per_iter))


def records_per_task(database, tasks, target) -> List[list]:
    """Each task's records in ``database`` for ``target`` (its tuned workload matched by structure)."""
    groups = group_by_workload(r for r in database.get_all_tuning_records() if same_target(r.target, target))
    return [groups.get(structural_key(task.dispatched[0]), []) for task in tasks]


def _warn_of_unreached_tasks(n_tasks: int, max_trials_global: int, num_trials_per_iter: int) -> None:
    reached = tasks_reached(n_tasks, max_trials_global, num_trials_per_iter)
    if reached == n_tasks:
        return
    enough = f"--trials {n_tasks * num_trials_per_iter}"
    if max_trials_global >= n_tasks:
        enough += f" or --per-iter {max_trials_global // n_tasks}"
    logging.getLogger("ms_pruner").warning(
        "%d trials at %d a round may reach only %d of the model's %d tasks (each task gets a round before any "
        "gets a second); a task left with no record in the database runs a default schedule: %s reaches every task",
        max_trials_global, num_trials_per_iter, reached, n_tasks, enough)


def tune_relax(mod, params: Optional[Dict], target, work_dir: str, max_trials_global: Optional[int],
               strategy: str = "pruner", *, builder="pruner", runner=None, seed: Optional[int] = None,
               num_trials_per_iter: int = 64, pretrained: Optional[str] = None, progress: bool = True,
               space: str = "auto", first_round: bool = True, cost_model: Optional[str] = None,
               rpc: Union[str, Tracker, None] = None, warm_start: Sequence[str] = (),
               pruner_settings: Optional[Mapping[str, object]] = None, resume: bool = False) -> RelaxTuneResult:
    """Tune every task of a Relax module with ``strategy`` and compile it with the results.

    ``space`` is one for all tasks (``auto``: ``all`` on sm_80+ when the mma rule takes a block of a
    task); ``first_round``, ``cost_model``, ``rpc``, ``warm_start`` and ``pruner_settings`` (every
    task's) as tune_tir's. ``max_trials_global`` is MetaSchedule's budget for this call (None: a
    round of ``num_trials_per_iter`` for each task); with
    ``resume`` it counts the records of the model's tasks already in ``work_dir`` (tune_tir's
    meaning), so the same call again goes on with a run that was cut short: its round log and clock
    carried on, the cost model first learning the earlier records; with none left it compiles."""
    if max_trials_global is not None:
        require_positive("--trials", max_trials_global)
    require_positive("--per-iter", num_trials_per_iter)
    check_search(strategy, pretrained, seed, cost_model, first_round, warm_start, pruner_settings)
    if isinstance(target, (str, dict)):
        target = resolve_target(target, require_device=False).target
    register_tensor_intrinsics()
    fused = legalize_and_fuse(mod)
    tasks = ms.relax_integration.extract_tasks(fused, target, params)
    if not tasks:
        raise UserError("the model has no tunable operators")
    max_trials_global = max_trials_global or len(tasks) * num_trials_per_iter
    _, target, generator = tuning_space(space, [task.dispatched[0] for task in tasks], target)
    require_sources(warm_start, [task.dispatched[0] for task in tasks], target)
    if rpc is not None and runner is None:
        runner = make_fleet_runner(Tracker.of(rpc), target)
    with sole_writer(work_dir, f"tune-model {strategy}"):
        database = open_database(work_dir, create=True)
        earlier = records_per_task(database, tasks, target) if resume else [[] for _ in tasks]
        remaining = max_trials_global - sum(len(records) for records in earlier)
        earlier_run = resume_point(os.path.join(work_dir, ROUND_LOG), [r for rs in earlier for r in rs], None)
        rounds = list(earlier_run.rounds) if earlier_run else []
        if remaining > 0:
            _warn_of_unreached_tasks(len(tasks), remaining, num_trials_per_iter)
            strategy_obj, model = search_components(strategy, target, pretrained, seed, cost_model, first_round,
                                                    warm_start, pruner_settings)
            with instrumented_session(work_dir, remaining, strategy_obj, builder, runner, f"tuning model ({strategy})",
                                      progress, earlier_run, cost_model=model) as (clock, measure):
                stop_unless_time_for(max(batch_seconds(rounds), default=0.0))
                for task, records in zip(tasks, earlier):
                    if records:
                        model, _ = warmed_cost_model(model, task.dispatched[0], target, records)
                contexts, weights = _tune_contexts(tasks, earlier, work_dir, generator, strategy_obj, seed)
                ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=work_dir, max_trials_global=remaining,
                              num_trials_per_iter=num_trials_per_iter, database=database, cost_model=model, **measure)
            rounds += [dataclasses.asdict(r) for r in clock.rounds]
        valid = [sum(1 for r in records if is_valid(r)) for records in records_per_task(database, tasks, target)]
        return RelaxTuneResult(executable=compile_tuned(database, mod, target, params), database=database,
                               tasks=[t.task_name for t in tasks], task_weights=[float(t.weight) for t in tasks],
                               rounds=rounds, trials=max_trials_global, task_records=valid)


def _tune_contexts(tasks, earlier, work_dir: str, space, strategy, seed) -> tuple:
    """(TuneContexts, weights) of ``tasks`` as ``ms.relax_integration.tune_relax`` makes them, those
    with no record in ``earlier`` first: MetaSchedule's task scheduler gives each task a round in
    this order before any gets a second, so a resumed run first gives the tasks that the cut call
    never reached their round (in a fresh run the order is the model's)."""
    order = sorted(range(len(tasks)), key=lambda i: bool(earlier[i]))
    return ms.relax_integration.extracted_tasks_to_tune_contexts(
        [tasks[i] for i in order], work_dir, space=space, strategy=strategy, seed=seed)


def run_executable(executable, target, inputs: List[np.ndarray], repeat: int = 20,
                   tracker: Optional[Tracker] = None):
    """(outputs as numpy, median seconds per call) on the target's device here or, with ``tracker``,
    on one of its servers: the executable exported with its device code compiled here, as a
    candidate is (``builder.with_device_code``), so a server without nvcc runs it."""
    if tracker is None:
        return _run_vm(executable, tvm.device(target_device_type(target), 0), inputs, repeat)
    with exported(with_device_code(executable, target)) as artifact:
        return tracker.run_loaded(artifact, target_device_type(target),
                                  lambda module, device: _run_vm(module, device, inputs, repeat))


def run_library(path: str, target, inputs: List[np.ndarray]) -> List[np.ndarray]:
    """The outputs of a model library (``export_model``) loaded by TVM's runtime here and run once."""
    return _run_vm(tvm.runtime.load_module(path), tvm.device(target_device_type(target), 0), inputs, 1)[0]


def _run_vm(executable, device, inputs: List[np.ndarray], repeat: int):
    """Through the VM's stateful calls, whose tuple of outputs also comes back over RPC."""
    vm = relax.VirtualMachine(executable, device)
    vm.set_input("main", *[tvm.runtime.tensor(x, device) for x in inputs])
    vm.invoke_stateful("main")
    outputs = _flatten(vm.get_outputs("main"))
    timer = vm.time_evaluator("invoke_stateful", device, number=repeat, repeat=3)
    return outputs, float(np.median(timer("main").results))


def _flatten(result) -> List[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    out = []
    for item in result:
        out.extend(_flatten(item))
    return out


def compare_outputs(got: List[np.ndarray], want: List[np.ndarray], dtype: str,
                    reference: str = "torch") -> Optional[str]:
    """None when every output matches ``reference``'s, else a one-line description of the worst mismatch."""
    rtol, atol = (2e-2, 2e-2) if dtype == "float16" else (1e-4, 1e-4)
    if len(got) != len(want):
        return f"the model returned {len(got)} outputs, {reference} {len(want)}"
    for index, (a, b) in enumerate(zip(got, want)):
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a64.shape != b64.shape:
            return f"output {index} has shape {a64.shape}, {reference} {b64.shape}"
        diff = np.abs(a64 - b64)
        bound = atol + rtol * np.abs(b64)
        if np.any(diff > bound) or not np.all(np.isfinite(a64)):
            worst = int(np.argmax(diff - bound))
            return (f"output {index} differs from {reference}: max abs diff {float(diff.max()):.3g} at flat index "
                    f"{worst} (tolerance {atol} + {rtol} x |{reference}|)")
    return None
