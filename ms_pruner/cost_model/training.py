"""Ranking loss and the time-budgeted training loop for PaCM."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch

from ..analysis.metrics import ndcg_at_k, spearman
from .net import PaCMNet
from .tokens import pad_batch

FAILED = math.inf
VALIDATION_SHARE = 0.2  # each task's later share of records that validates a fit
MIN_VALIDATED_RECORDS = 10  # a task with fewer records is not split


@dataclasses.dataclass
class Sample:
    """One measured candidate: its tokens, analyzer prior, latency (inf if it failed), task and
    sampled decisions (``knobs.schedule_knobs``)."""

    tokens: np.ndarray
    prior: float
    latency_s: float
    task: str
    knobs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.float32))


def relevance(samples: List[Sample]) -> np.ndarray:
    """Normalised throughput per task: best latency / latency, 0 for failures."""
    best: Dict[str, float] = {}
    for s in samples:
        if math.isfinite(s.latency_s):
            best[s.task] = min(best.get(s.task, math.inf), s.latency_s)
    return np.array([best[s.task] / s.latency_s if math.isfinite(s.latency_s) and s.task in best else 0.0
                     for s in samples], dtype=np.float32)


def lambda_rank_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LambdaRank: pairwise logistic loss weighted by the NDCG change of swapping the pair."""
    n = scores.shape[0]
    if n < 2:
        return scores.sum() * 0.0
    order = torch.argsort(scores.detach(), descending=True)
    ranks = torch.empty(n, dtype=scores.dtype, device=scores.device)
    ranks[order] = torch.arange(1, n + 1, dtype=scores.dtype, device=scores.device)
    gains = torch.pow(2.0, labels) - 1.0
    ideal = torch.sort(gains, descending=True).values
    max_dcg = (ideal / torch.log2(torch.arange(2, n + 2, dtype=scores.dtype, device=scores.device))).sum()
    gains = gains / max_dcg.clamp(min=1e-9)
    discount = 1.0 / torch.log2(1.0 + ranks)
    weight = (discount[:, None] - discount[None, :]).abs() * (gains[:, None] - gains[None, :]).abs()
    better = (labels[:, None] > labels[None, :]).to(scores.dtype)
    diff = scores[:, None] - scores[None, :]
    pair_weight = better * weight
    loss = (pair_weight * torch.nn.functional.softplus(-diff)).sum()
    return loss / pair_weight.sum().clamp(min=1e-12)


@dataclasses.dataclass
class FitReport:
    epochs: int
    seconds: float
    first_loss: float
    last_loss: float


def task_groups(tasks: Sequence[str], index: Optional[Iterable[int]] = None) -> Dict[str, List[int]]:
    """The indices ``index`` (default: all of ``tasks``) grouped by their task, each in the order given."""
    groups: Dict[str, List[int]] = {}
    for i in range(len(tasks)) if index is None else index:
        groups.setdefault(tasks[i], []).append(i)
    return groups


def priors(samples: List[Sample]) -> np.ndarray:
    """The analyzer's score of each sample, -log(latency): what the learned parts add to."""
    return np.array([s.prior for s in samples], dtype=np.float64)


def later_share_split(tasks: Sequence[str], share: float, min_records: int):
    """(train, validate) indices: per task, its later ``share`` of records in measurement order
    validates (none for a task of fewer than ``min_records``), the rest trains; grouped by task.

    Later measurements are better than earlier ones, so this asks the same question tuning does:
    does what was learned from the past rank the future well?
    """
    train, val = [], []
    for members in task_groups(tasks).values():
        n_val = int(len(members) * share) if len(members) >= min_records else 0
        train.extend(members[: len(members) - n_val])
        val.extend(members[len(members) - n_val:])
    return train, val


def ranking_quality(scores: np.ndarray, samples: List[Sample]) -> Optional[float]:
    """Spearman + NDCG@10 of ``scores`` (higher = faster) against the samples' measured latencies,
    failures left out; None with fewer than three measured."""
    latency = np.array([s.latency_s for s in samples])
    ok = np.isfinite(latency)
    if ok.sum() < 3:
        return None
    return spearman(-scores[ok], latency[ok]) + ndcg_at_k(scores[ok], latency[ok], k=10, repeats=20)


def _validation_quality(net: PaCMNet, samples: List[Sample], index: List[int], device) -> float:
    chosen = [samples[i] for i in index]
    quality = ranking_quality(predict_scores(net, chosen, device), chosen) if chosen else None
    return 0.0 if quality is None else quality


def margin_over_prior(net: PaCMNet, samples: List[Sample], device: torch.device) -> float:
    """How much better ``net`` ranks ``samples`` than the analyzer's prior alone: the difference in
    ``ranking_quality``, summed over tasks (a task of fewer than three measured counts 0)."""
    margin = 0.0
    for index in task_groups([s.task for s in samples]).values():
        members = [samples[i] for i in index]
        net_quality = ranking_quality(predict_scores(net, members, device), members)
        prior_quality = ranking_quality(priors(members), members)
        if net_quality is not None and prior_quality is not None:
            margin += net_quality - prior_quality
    return margin


def fit(net: PaCMNet, samples: List[Sample], device: torch.device, time_budget_s: float = 8.0,
        max_epochs: int = 60, batch_size: int = 256, lr: float = 7e-4, weight_decay: float = 1e-4,
        seed: int = 0, val_frac: float = VALIDATION_SHARE, min_gain: float = 0.05) -> FitReport:
    """Train ``net`` in place on ``samples`` (grouped by task) until the budget or epochs run out.

    The weights kept are those that ranked the held-out later samples best, the starting weights
    included: training that does not generalise to newer candidates is thrown away.
    """
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    labels_all = relevance(samples)
    tasks = [s.task for s in samples]
    train_index, val_index = later_share_split(tasks, val_frac, MIN_VALIDATED_RECORDS)
    groups = task_groups(tasks, train_index)
    tokens, padding = pad_batch([s.tokens for s in samples])
    tokens_t = torch.from_numpy(tokens).to(device)
    padding_t = torch.from_numpy(padding).to(device)
    prior_t = torch.tensor([s.prior for s in samples], dtype=torch.float32, device=device)
    labels_t = torch.from_numpy(labels_all).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    # Leaving the starting weights must be worth it on held-out samples, not noise: demand a margin.
    best_quality = _validation_quality(net, samples, val_index, device) + min_gain
    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    first = last = math.nan
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        net.train()
        losses = []
        for members in groups.values():
            perm = rng.permutation(members)
            for offset in range(0, len(perm), batch_size):
                index = torch.as_tensor(perm[offset: offset + batch_size], device=device)
                if len(index) < 2:
                    continue
                scores = net(tokens_t[index], padding_t[index], prior_t[index])
                loss = lambda_rank_loss(scores, labels_t[index])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                optimizer.step()
                losses.append(float(loss.detach()))
        if losses:
            last = float(np.mean(losses))
            first = last if math.isnan(first) else first
        if val_index:
            quality = _validation_quality(net, samples, val_index, device)
            if quality > best_quality:
                best_quality = quality
                best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        if time.perf_counter() - start > time_budget_s:
            break
    if val_index:
        net.load_state_dict(best_state)
    net.eval()
    return FitReport(epochs=epoch, seconds=time.perf_counter() - start, first_loss=first, last_loss=last)


def ranking_loss(net: PaCMNet, samples: List[Sample], device: torch.device) -> float:
    """The LambdaRank loss of ``net`` over each task's full sample set (for tests and reports)."""
    labels = relevance(samples)
    total, count = 0.0, 0
    with torch.no_grad():
        for members in task_groups([s.task for s in samples]).values():
            scores = predict_scores(net, [samples[i] for i in members], device)
            total += float(lambda_rank_loss(torch.from_numpy(scores), torch.from_numpy(labels[members])))
            count += 1
    return total / max(1, count)


def predict_scores(net: PaCMNet, samples, device: torch.device, batch_size: int = 4096,
                   max_tokens: Optional[int] = None) -> np.ndarray:
    """Raw scores (higher = faster) for items with ``tokens`` and ``prior``."""
    out = []
    net.eval()
    with torch.no_grad():
        for offset in range(0, len(samples), batch_size):
            chunk = samples[offset: offset + batch_size]
            tokens, padding = pad_batch([s.tokens for s in chunk], max_tokens)
            prior = torch.tensor([s.prior for s in chunk], dtype=torch.float32, device=device)
            scores = net(torch.from_numpy(tokens).to(device), torch.from_numpy(padding).to(device), prior)
            out.append(scores.cpu().numpy().astype(np.float64))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float64)
