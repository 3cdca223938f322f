"""Offline pretraining of PaCM from MetaSchedule databases (``ms-pruner train``)."""

from __future__ import annotations

import math
from typing import List

from ..database.records import FAILED_RUN_SECONDS, mean_latency, replayed_in_file_order
from ..errors import UserError
from .pacm import PaCMCore, _task_key
from .training import Sample


def database_samples(core: PaCMCore, path: str) -> List[Sample]:
    """Every record of a database as a training sample (trace replayed, tokens extracted)."""
    samples = []
    for record, sch in replayed_in_file_order(path):
        sample = core.featurize([sch], record.target)[0]
        latency = mean_latency(record)
        sample.latency_s = latency if latency < FAILED_RUN_SECONDS else math.inf
        sample.task = _task_key(record.workload.mod)
        samples.append(sample)
    return samples


def train_offline(paths: List[str], out: str, time_budget_s: float = 300.0, max_epochs: int = 200,
                  seed: int = 0, residual: str = "transformer") -> dict:
    """A PaCM file pretrained on every record of ``paths``: a transformer for MoA (``--strategy moa``),
    or trees that ``PaCM(pretrained=...)`` offers its gate as a warm start."""
    core = PaCMCore(time_budget_s=time_budget_s, max_epochs=max_epochs, seed=seed, residual=residual)
    for path in paths:
        core.add(database_samples(core, path))
    if sum(math.isfinite(s.latency_s) for s in core.samples) < 2:
        raise UserError(f"{', '.join(paths)}: {len(core.samples)} records, fewer than 2 measured; nothing to "
                        "train on")
    report = core.train(offline=True)
    core.save(out)
    return {
        "samples": len(core.samples),
        "seconds": report.seconds if report else 0.0,
        "epochs": report.epochs if report else 0,
    }
