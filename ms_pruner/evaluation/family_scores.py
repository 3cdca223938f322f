"""The analyzer on a database that holds both tensor-core rule families (``ms-pruner analyze``).

A space of two families (``--space all``, docs/space.md) is searched on one scale: the draft keeps
the candidates the analyzer estimates fastest, whichever family they come from. One Spearman over
the whole database cannot say whether that scale is shared. Within a family the analyzer may rank
well while it estimates one family's kernels 1.5x too fast against the other's, and the search
would then measure the wrong family. So each family and instruction gets its own ranking figures
and its median measured/estimated latency (equal medians: one scale), and the pairs that take one
record from each family get their own concordance.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Dict, List, Optional, Sequence

from ..analysis.metrics import recall_at_top, spearman
from ..space.families import FAMILIES


def _scored(records: Sequence) -> List:
    return [r for r in records if r.predicted_s is not None and r.measured_s is not None]


def _group_scores(records: Sequence) -> dict:
    """How the analyzer ranks one group: Spearman and recall (None under three scored records),
    the fastest measured, and the median of measured over estimated latency."""
    scored = _scored(records)
    predicted = [r.predicted_s for r in scored]
    measured = [r.measured_s for r in scored]
    enough = len(scored) >= 3
    fastest = min(scored, key=lambda r: r.measured_s) if scored else None
    return {
        "records": len(records),
        "scored": len(scored),
        "spearman": spearman(predicted, measured) if enough else None,
        "recall_top10_in_top30": recall_at_top(predicted, measured) if enough else None,
        "best_measured_us": fastest.measured_s * 1e6 if fastest else None,
        "best_estimated_us": fastest.predicted_s * 1e6 if fastest else None,
        "measured_over_estimate_median": statistics.median(m / p for p, m in zip(predicted, measured))
        if scored else None,
    }


def _grouped(records: Sequence) -> Dict[str, List]:
    """Tensor-core records by rule family (``family``) and mma records by instruction too."""
    groups: Dict[str, List] = {}
    for record in records:
        if record.family is None:
            continue
        groups.setdefault(record.family, []).append(record)
        if record.instruction != record.family:
            groups.setdefault(record.instruction, []).append(record)
    return groups


def cross_family_concordance(records: Sequence) -> Optional[float]:
    """Of the pairs with one scored record of each family, the share the analyzer orders as they
    measured (a tie on either side counts half); None without such a pair."""
    groups = _grouped(_scored(records))
    pairs = list(itertools.product(groups.get("wmma", []), groups.get("mma", [])))
    if not pairs:
        return None
    agree = 0.0
    for a, b in pairs:
        predicted, measured = a.predicted_s - b.predicted_s, a.measured_s - b.measured_s
        agree += 0.5 if predicted == 0 or measured == 0 else float((predicted > 0) == (measured > 0))
    return agree / len(pairs)


def family_scores(records: Sequence) -> Optional[dict]:
    """Per family and per mma instruction, ``_group_scores``; the cross-family concordance; the
    instruction of the fastest measured record and of the measured record the analyzer estimates
    fastest. None for a database without tensor-core records (``family`` None throughout)."""
    groups = _grouped(records)
    if not groups:
        return None
    scored = _scored(records)
    fastest = min(scored, key=lambda r: r.measured_s) if scored else None
    top_estimate = min(scored, key=lambda r: r.predicted_s) if scored else None
    order = [f for f in FAMILIES if f in groups] + sorted(set(groups) - set(FAMILIES), key=lambda n: (len(n), n))
    return {
        "groups": {name: _group_scores(groups[name]) for name in order},
        "cross_family_concordance": cross_family_concordance(records),
        "fastest_measured": fastest.instruction if fastest else None,
        "fastest_estimated": top_estimate.instruction if top_estimate else None,
    }


def format_family_scores(scores: dict) -> List[str]:
    """``family_scores`` as the lines ``ms-pruner analyze`` prints."""
    lines = []
    for name, group in scores["groups"].items():
        if not group["scored"]:
            lines.append(f"{name}: 0/{group['records']} scored")
            continue
        spearman_text = f"{group['spearman']:.3f}" if group["spearman"] is not None else "-"
        lines.append(f"{name}: {group['scored']}/{group['records']} scored, spearman {spearman_text}, "
                     f"measured/estimated median {group['measured_over_estimate_median']:.2f}, "
                     f"best {group['best_measured_us']:.1f} us")
    concordance = scores["cross_family_concordance"]
    if concordance is not None:
        lines.append(f"wmma against mma pairs ordered as measured: {concordance:.3f}")
    lines.append(f"fastest measured: {scores['fastest_measured']}; fastest estimated: {scores['fastest_estimated']}")
    return lines
