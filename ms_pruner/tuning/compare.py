"""Side-by-side comparison: stock MetaSchedule vs Pruner (and MoA) on the same workloads.

Every strategy tunes every workload with the same trial budget, builder, runner and seed, one
after the other, each in a fresh work dir. The outputs are ``compare.json`` (per-round best
latency, trials, wall time, search/build/run split), ``compare.png`` (best latency against wall
time and against trials) and ``compare.md`` (final bests, the wall time Pruner needed to reach
stock's final best, the resulting search speedup, and the search-overhead share per round).
"""

from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Mapping, Optional, Sequence, Union

from ..errors import UserError, require_positive
from ..files import make_folder, replace_file, replace_json
from ..search.settings import setting_value
from ..search.stats import STAGES
from ..space import resolve_space
from ..units import microseconds
from ..workloads import KernelFile
from .compare_plot import plot
from .driver import PRUNER_STRATEGIES, ROUND_LOG, check_search, normalized_mod, tune_tir
from .fleet import Tracker
from .instrument import continues_batch
from .reference import reference_latency
from .resume import logged_rounds, workload_tag


def _curve(rounds: List[dict]) -> List[dict]:
    """A run's rounds (the round log's entries) as the comparison's curve."""
    curve = []
    trials = 0
    for entry in rounds:
        trials += entry["trials"]
        overhead = entry["search_s"] + entry.get("update_s", 0.0)
        busy = overhead + entry["build_s"] + entry["run_s"]
        curve.append({
            "round": entry["round"],
            "trials": trials,
            "wall_s": entry["wall_s"],
            "best_latency_s": entry["best_latency_s"],
            "search_s": entry["search_s"],
            "build_s": entry["build_s"],
            "run_s": entry["run_s"],
            "update_s": entry.get("update_s", 0.0),
            "search_share": overhead / busy if busy > 0 else 0.0,
            "strategy_split": entry.get("strategy", {}),
            "call": entry.get("session", 0),
        })
    return curve


def time_to_reach(curve: List[dict], target: float) -> Optional[float]:
    """Wall time of the first round whose best is at least as good as ``target``."""
    for point in curve:
        if point["best_latency_s"] is not None and point["best_latency_s"] <= target:
            return point["wall_s"]
    return None


def summarize(runs: Dict[str, dict]) -> dict:
    stock = runs.get("stock")
    summary = {}
    for name, run in runs.items():
        curve = run["curve"]
        summary[name] = {
            "final_best_s": run["best_latency_s"],
            "best_instruction": run.get("best_instruction"),  # the best's tensor-core instruction (tune_tir)
            "wall_s": curve[-1]["wall_s"] if curve else 0.0,
            "trials": curve[-1]["trials"] if curve else 0,
            "mean_search_share": sum(p["search_share"] for p in curve) / len(curve) if curve else 0.0,
            # The speedup divides the stock run's whole wall time; this says when it found its best.
            "time_to_own_best_s": time_to_reach(curve, run["best_latency_s"]) if run["best_latency_s"] else None,
        }
        if stock is not None and name != "stock" and stock["best_latency_s"]:
            reached = time_to_reach(curve, stock["best_latency_s"])
            summary[name]["time_to_stock_best_s"] = reached
            stock_wall = stock["curve"][-1]["wall_s"] if stock["curve"] else None
            summary[name]["search_speedup"] = stock_wall / reached if reached and stock_wall else None
    return summary


def comparison_settings(choice, trials: int, per_iter: int, seed: int, builder: str, space: str = "auto",
                        first_round: bool = True, cost_model: Optional[str] = None,
                        warm_start: Sequence[str] = (), pruner_settings: Optional[Mapping[str, object]] = None) -> dict:
    """What two comparisons must share for their runs to sit in one table (a trial count or round
    size below one, or a space the target has not, is refused here, before any comparison is read
    or written)."""
    require_positive("--trials", trials)
    require_positive("--per-iter", per_iter)
    if space != "auto":
        resolve_space(space, None, choice.target)
    return {"target": str(choice.target), "trials": trials, "per_iter": per_iter, "seed": seed, "builder": builder,
            "space": space, "first_round": first_round, "cost_model": cost_model, "warm_start": list(warm_start),
            "pruner_settings": {name: setting_value(name, value) for name, value in (pruner_settings or {}).items()}}


def _setting_before(report: dict, key: str):
    """A setting of a comparison written before the setting existed: the builder was ours, and a
    CUDA comparison searched the WMMA family alone (the space choice came later), and Pruner ran
    with its first-round policy (the switch came later)."""
    if key == "space":
        return "wmma" if '"cuda"' in str(report.get("target", "")) else "auto"
    return {"builder": "pruner", "first_round": True, "warm_start": [], "pruner_settings": {}}.get(key)


def load_previous(out_dir: str, settings: dict) -> dict:
    """The completed runs of an earlier ``compare`` into the same ``out_dir`` with the same settings.

    A GPU session gets at most ten minutes a call, less than stock + Pruner on two workloads at
    256 trials, so a comparison is run one strategy or workload at a time into one directory and
    merged here. Runs made under other settings are not comparable and are refused.
    """
    path = os.path.join(out_dir, "compare.json")
    if not os.path.exists(path):
        return {}
    return read_report(path, settings, "use another --out or --fresh")


def read_report(path: str, settings: dict, advice: str) -> dict:
    """The comparison in ``path``, refused when it was made under other ``settings``."""
    report = load_report(path, "earlier comparison")
    earlier = {key: report.get(key, _setting_before(report, key)) for key in settings}
    if earlier != settings:
        raise UserError(f"{path} was made with {earlier}, not {settings}; {advice}")
    return report


def load_report(path: str, what: str) -> dict:
    """A compare.json's contents; one clear line naming ``what`` it is when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {what} {path}: {err}") from err


def finished_work_dirs(out_dir: str, strategy: str) -> List[str]:
    """The work dirs of ``strategy``'s finished runs in the comparison under ``out_dir`` (its
    compare.json), one a workload; runs set aside to be made again (``superseded``) are not among them."""
    path = os.path.join(out_dir, "compare.json")
    report = load_report(path, "comparison")
    dirs = [entry["runs"][strategy]["work_dir"] for entry in report.get("workloads", {}).values()
            if strategy in entry.get("runs", {})]
    if not dirs:
        raise UserError(f"{path} has no finished {strategy} run")
    return dirs


def run_comparison(workloads, choice, trials: int, per_iter: int, out_dir: str, seed: int = 0,
                   strategies=("stock", "pruner"), pretrained: Optional[str] = None, builder: str = "pruner",
                   progress: bool = True, previous: Optional[dict] = None, on_run=None, space: str = "auto",
                   first_round: bool = True, cost_model: Optional[str] = None, rpc: Union[str, Tracker, None] = None,
                   warm_start: Sequence[str] = (), pruner_settings: Optional[Mapping[str, object]] = None) -> dict:
    """Tune every workload with every strategy, skipping runs already in ``previous``.

    ``on_run(report)`` is called before each run starts (the report names its work dir under
    ``pending``) and after it finishes, so a call cut off by a time limit keeps every finished run,
    and the next call resumes the cut one in its work dir (tune_tir) instead of starting it again.
    Every strategy searches the same ``space`` (ms_pruner.space); ``first_round``, ``cost_model`` and
    ``pruner_settings`` (tune_tir) apply to the Pruner strategies, for ablations, stock staying the
    baseline; ``rpc`` measures every run on a tracker's servers (tune_tir), and then the vendor
    library, which torch would time on this machine, is left out.
    """
    switches = check_strategies(strategies, pretrained, seed, first_round, cost_model, warm_start, pruner_settings)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    previous = previous or {}
    report = dict(comparison_settings(choice, trials, per_iter, seed, builder, space, first_round, cost_model,
                                      warm_start, pruner_settings),
                  workloads=dict(previous.get("workloads", {})), commands=list(previous.get("commands", [])),
                  planned=list(dict.fromkeys(list(previous.get("planned", [])) + [w.spec for w in workloads])))
    for workload in workloads:
        entry = report["workloads"].setdefault(workload.spec, _new_entry(workload))
        for strategy in strategies:
            if strategy in entry["runs"]:
                continue
            pending, calls = entry.setdefault("pending", {}), entry.setdefault("calls", {})
            if strategy not in pending:  # a new run's own dir, never one of a run set aside (restore.py)
                path = os.path.join(out_dir, "work", workload.spec.replace(":", "_"), f"{strategy}-{stamp}")
                pending[strategy] = path + ("-again" if os.path.exists(path) else "")
            calls[strategy] = calls.get(strategy, 0) + 1
            entry["summary"] = summarize(entry["runs"])
            if on_run is not None:
                on_run(report)
            work_dir = pending[strategy]
            try:
                result = tune_tir(workload.prim_func(), choice.target, work_dir, trials, strategy=strategy,
                                  builder=builder, seed=seed, num_trials_per_iter=per_iter,
                                  pretrained=pretrained if strategy == "moa" else None, progress=progress,
                                  call=calls[strategy] - 1, space=space, rpc=rpc, **switches[strategy])
            except KeyboardInterrupt:  # a time limit or Ctrl-C: keep what the cut run has measured
                entry.setdefault("partial", {})[strategy] = _partial_run(workload, work_dir)
                if on_run is not None:
                    on_run(report)
                raise
            entry["runs"][strategy] = _finished_run(work_dir, result, calls.pop(strategy))
            del pending[strategy]
            entry.get("partial", {}).pop(strategy, None)
            entry["summary"] = summarize(entry["runs"])
            if on_run is not None:
                on_run(report)
        entry["summary"] = summarize(entry["runs"])
        if entry.get("reference") is None and rpc is None:  # torch runs here, not on the servers
            entry["reference"] = reference_latency(workload, choice.is_cuda)
    return report


def _new_entry(workload) -> dict:
    """A workload's entry in compare.json; a user's own kernel names its file (check --compare)."""
    source = {"file": f"{workload.source.path}:{workload.source.name}"} if isinstance(workload, KernelFile) else {}
    return {"flops": workload.flops, "runs": {}, **source}


def check_strategies(strategies, pretrained: Optional[str], seed: int, first_round: bool, cost_model: Optional[str],
                     warm_start: Sequence[str], pruner_settings: Optional[Mapping[str, object]]) -> dict:
    """Each strategy's switches (``_pruner_only``), checked as tune_tir would, before anything is written."""
    if "moa" in strategies and not pretrained:
        raise UserError("comparing moa needs --pretrained MODEL")
    switches = {s: _pruner_only(s, first_round, cost_model, warm_start, pruner_settings) for s in strategies}
    for strategy in strategies:
        check_search(strategy, pretrained, seed, **switches[strategy])
    return switches


def _finished_run(work_dir: str, result, calls: int) -> dict:
    """A finished run's entry in compare.json: its best, its curve, the calls it took, and which
    tensor-core instruction its best uses (None off tensor cores)."""
    return {"work_dir": work_dir, "best_latency_s": result.best_latency_s, "curve": _curve(result.rounds),
            "calls": calls, "best_instruction": result.best_instruction}


def _pruner_only(strategy: str, first_round: bool, cost_model: Optional[str], warm_start: Sequence[str],
                 pruner_settings: Optional[Mapping[str, object]]) -> dict:
    """The Pruner-only switches as check_search and tune_tir take them for ``strategy``: a stock run
    of a comparison stays the baseline."""
    pruner = strategy in PRUNER_STRATEGIES
    return {"first_round": first_round or not pruner, "cost_model": cost_model if pruner else None,
            "warm_start": tuple(warm_start) if pruner else (), "pruner_settings": pruner_settings if pruner else None}


def _partial_run(workload, work_dir: str) -> dict:
    """The finished rounds of a run cut before its last (its round log), as a run's entry."""
    curve = _curve(logged_rounds(os.path.join(work_dir, ROUND_LOG), workload_tag(normalized_mod(workload.prim_func()))))
    bests = [p["best_latency_s"] for p in curve if p["best_latency_s"]]
    return {"work_dir": work_dir, "best_latency_s": min(bests) if bests else None, "curve": curve}


def _so_far(name: str, entry: dict) -> str:
    """What a cut run's finished rounds say, against stock's finished run."""
    partial = entry.get("partial", {}).get(name)
    if not partial or not partial["curve"]:
        return ""
    last = partial["curve"][-1]
    text = (f" So far {last['trials']} trials in {last['wall_s']:.0f} s, "
            f"best {microseconds(partial['best_latency_s'])} us (round {last['round']})")
    return text + _against_stock(name, partial, entry, "not yet at")


def _against_stock(name: str, run: dict, entry: dict, missed: str) -> str:
    """When ``run`` reached the finished stock run's final best, and how much sooner than stock."""
    stock = entry["runs"].get("stock")
    if name == "stock" or stock is None or not stock["best_latency_s"]:
        return "."
    summary = summarize({"stock": stock, name: run})[name]
    reached = summary.get("time_to_stock_best_s")
    if reached:
        return (f"; it reached stock's final best at {reached:.0f} s, "
                f"{summary['search_speedup']:.2f}x sooner than stock's whole run.")
    return f"; {missed} stock's final best ({microseconds(stock['best_latency_s'])} us)."


def _superseded(spec: str, name: str, run: dict, entry: dict) -> str:
    """A finished run set aside to be made again (restore's ``rerun``), against the stock run of its
    own comparison: the one set aside with it, if stock was made again too."""
    last = run["curve"][-1] if run["curve"] else {"trials": 0, "wall_s": 0.0}
    earlier_stock = entry.get("superseded", {}).get("stock")
    era = {"runs": {"stock": earlier_stock[0]}} if earlier_stock else entry
    return (f"\n`{spec}` {name}: an earlier run (`{run['work_dir']}`) was set aside and made again; it "
            f"measured {last['trials']} trials in {last['wall_s']:.0f} s, best {microseconds(run['best_latency_s'])} us"
            + _against_stock(name, run, era, "it never reached"))


def write_outputs(report: dict, out_dir: str, command: str, machine: dict) -> List[str]:
    """Write compare.json/.md/.png; ``commands`` lists every invocation that contributed runs."""
    make_folder(out_dir, "comparison folder")
    commands = list(report.get("commands", []))
    if command not in commands:
        commands.append(command)
    report.update(command=" ; ".join(commands), commands=commands, machine=machine)
    paths = [os.path.join(out_dir, "compare.json"), os.path.join(out_dir, "compare.md")]
    replace_json(paths[0], report)
    replace_file(paths[1], markdown_table(report))
    png = plot(report, os.path.join(out_dir, "compare.png"))
    return paths + ([png] if png else [])


def _own_best(summary: dict) -> str:
    own = summary.get("time_to_own_best_s")
    return f", {own:.0f}" if own else ""


def markdown_table(report: dict) -> str:
    lines = [
        f"Command: `{report.get('command', '')}`  ",
        f"Machine: {report.get('machine', {})}  ",
        f"Target: `{report['target']}`, {report['trials']} trials per strategy, {report['per_iter']} per round, "
        f"seed {report['seed']}" + ("" if report.get("first_round", True) else
                                    ", Pruner without its first-round policy (--no-first-round)")
        + (f", Pruner verifying with {report['cost_model']}" if report.get("cost_model") else "")
        + "".join(f", Pruner's {name} {value}" for name, value in sorted(report.get("pruner_settings", {}).items()))
        + ".",
        "",
        "| workload | stock best (us) | pruner best (us) | stock wall (s), to its best | "
        "pruner wall to reach stock best (s) | "
        "search speedup | search share stock / pruner | vendor library (Pruner's best as a share of its speed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += _workload_rows(report)
    for spec, entry in report["workloads"].items():
        for name, run in entry["runs"].items():
            if run.get("calls", 1) > 1:
                lines.append(f"\n`{spec}` {name} was stopped (a time limit or Ctrl-C) and resumed: "
                             f"{run['calls']} calls. "
                             "Its wall time sums the finished rounds of each call; a round cut short and the time "
                             "between calls are not counted, and the resumed call first trained the cost model "
                             "on the earlier records (counted as search).")
        for name, work_dir in entry.get("pending", {}).items():
            lines.append(f"\n`{spec}` {name}: unfinished, resumed by the next call from `{work_dir}`."
                         + _so_far(name, entry))
        for name, runs in entry.get("superseded", {}).items():
            lines.extend(_superseded(spec, name, run, entry) for run in runs)
    lines += ["", "Wall time starts when a call's builder and runner are ready (after the imports and their worker "
              "checks, the same for every strategy) and sums the finished rounds.", "",
              "Search share = (search + cost-model update) / (search + update + build + run), mean over "
              "rounds. Per-round split in seconds, with the Pruner search's own parts:", ""]
    return "\n".join(lines + _round_lines(report)) + "\n"


def _workload_rows(report: dict) -> List[str]:
    """One row a workload: each strategy's best (``not run`` for a run still missing, as for a
    workload of the planned suite no call has reached yet), the speedup and the vendor library."""
    rows = []
    planned = list(dict.fromkeys(list(report.get("planned", [])) + list(report["workloads"])))
    for spec in planned:
        summary = report["workloads"].get(spec, {}).get("summary") or {}
        stock, pruner = summary.get("stock") or {}, summary.get("pruner") or {}
        best = {name: (microseconds(run["final_best_s"]) + _instruction(run) if run else "not run") for name, run in
                (("stock", stock), ("pruner", pruner))}
        reached = pruner.get("time_to_stock_best_s")
        speedup = pruner.get("search_speedup")
        reached_text = f"{reached:.0f}" if reached else ("not reached" if pruner and stock else "-")
        wall = f"{stock.get('wall_s', 0):.0f}{_own_best(stock)}" if stock else "-"
        share = " / ".join(f"{run.get('mean_search_share', 0):.0%}" if run else "-" for run in (stock, pruner))
        rows.append(
            f"| `{spec}` | {best['stock']} | {best['pruner']} | {wall} | {reached_text} | "
            f"{f'{speedup:.2f}x' if speedup else '-'} | {share} | "
            f"{_vendor(report['workloads'].get(spec, {}).get('reference'), pruner.get('final_best_s'))} |")
        if "moa" in summary:
            moa = summary["moa"]
            rows.append(f"| `{spec}` (moa) | | {microseconds(moa.get('final_best_s'))}{_instruction(moa)} | | "
                        f"{moa.get('time_to_stock_best_s') or 'not reached'} | {moa.get('search_speedup') or '-'} | "
                        f"{moa.get('mean_search_share', 0):.0%} | |")
    return rows


def _instruction(summary: dict) -> str:
    """`` (m16n8k16)``: which tensor-core instruction a run's best uses, where the run recorded it."""
    return f" ({summary['best_instruction']})" if summary.get("best_instruction") else ""


def _vendor(reference: Optional[dict], pruner_best: Optional[float]) -> str:
    if not reference:
        return "-"
    share = f" ({reference['latency_s'] / pruner_best:.0%})" if pruner_best else ""
    return f"{reference['what']} {microseconds(reference['latency_s'])} us{share}"


def _round_lines(report: dict) -> List[str]:
    """One line a round of every run: its seconds by part and the best so far."""
    lines = []
    for spec, entry in report["workloads"].items():
        for name, run in entry["runs"].items():
            for point in run["curve"]:
                split = point["strategy_split"]
                parts = ", ".join(f"{k} {split[k + '_s']:.1f}" for k in STAGES if k + "_s" in split)
                call = f" (call {point['call'] + 1})" if run.get("calls", 1) > 1 else ""
                call += " (follow-up)" if continues_batch({"strategy": split}) else ""
                lines.append(f"- `{spec}` {name} round {point['round']}{call}: search {point['search_s']:.1f}, "
                             f"model update {point['update_s']:.1f}, build {point['build_s']:.1f}, "
                             f"run {point['run_s']:.1f}"
                             f"{' (' + parts + ')' if parts else ''}; best {microseconds(point['best_latency_s'])} us")
    return lines
