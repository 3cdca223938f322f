"""One JSON summary per ``tune-model`` run and the table that puts runs side by side.

Whole-model comparisons (stock vs Pruner vs torch, or vs TVM's default build for a Relax module)
are made of separate ``tune-model`` runs, one per strategy, often in separate time-limited calls;
each leaves ``tune_model.json`` in its work dir and ``model_table`` joins them.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, List

from ..errors import UserError
from ..files import replace_json
from ..units import microseconds

SUMMARY_FILE = "tune_model.json"


def write_summary(work_dir: str, summary: dict) -> str:
    path = os.path.join(work_dir, SUMMARY_FILE)
    replace_json(path, summary)
    return path


def read_summaries(paths: Iterable[str]) -> List[dict]:
    """Summaries from work dirs or ``tune_model.json`` paths, in the order given."""
    summaries = []
    for path in paths:
        file = os.path.join(path, SUMMARY_FILE) if os.path.isdir(path) else path
        try:
            with open(file, encoding="utf-8") as handle:
                summaries.append(json.load(handle))
        except (OSError, ValueError) as err:
            raise UserError(f"cannot read a tune-model summary at {file}: {err}") from err
    return summaries


def _tasks(summary: dict) -> str:
    """'18 (2)': the model's tasks and how many have tuned records (the rest run default schedules);
    summaries written before that count was kept give the tasks alone."""
    tuned = summary.get("tasks_with_records")
    return f"{summary['tasks']}" + (f" ({tuned})" if tuned is not None else "")


def _where(summary: dict) -> str:
    """The target kind, and the tracker where the model ran on a server (``tune-model --rpc``)."""
    return summary["target_kind"] + (f" (a server of {summary['rpc']})" if summary.get("rpc") else "")


def _outputs(summary: dict) -> str:
    """'match' (against torch), 'match TVM's default build' (a Relax module's bar), or the mismatch."""
    if not summary["outputs_match"]:
        return summary["mismatch"]
    reference = summary.get("reference", "torch")
    return "match" if reference == "torch" else f"match {reference}"


def model_table(summaries: List[dict]) -> str:
    """Markdown: per model and strategy, end-to-end latency next to torch eager / torch.compile, or
    next to TVM's build with no tuning record (a user's Relax module)."""
    lines = [
        "| model | target | strategy | trials | tasks (tuned) | tuning wall (s) | ms_pruner (us) | torch eager (us) | "
        "torch.compile (us) | TVM, no record (us) | outputs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        lines.append(
            f"| {s['model']} ({s['dtype']}) | {_where(s)} | {s['strategy']} | {s['trials']} | {_tasks(s)} | "
            f"{s['tuning_wall_s']:.0f} | {microseconds(s['latency_s'])} | {microseconds(s['torch_eager_s'])} | "
            f"{microseconds(s['torch_compile_s'])} | {microseconds(s.get('default_build_s'))} | {_outputs(s)} |"
        )
    return "\n".join(lines) + "\n"
