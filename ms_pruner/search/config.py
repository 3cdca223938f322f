"""PrunerSearch's settings: one frozen config for Pruner's round and one for the first-round policy.

A field left None is resolved per kind of target (GPU or CPU) from the tables below when the
strategy meets its tune context (``resolved``); docs/search.md lists every field and what each
default was validated on.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Dict, Optional, Tuple

# Fewest fresh samples a round draws (where MetaSchedule's C++ sampler stops).
MIN_FRESH_SAMPLES = 16

# Per kind of target, the value of a field left None.
TARGET_DEFAULTS: Dict[str, Dict[str, float]] = {
    # the cold round's parent-selection power: the analyzer's GPU model ranks the H100 records at
    # Spearman 0.95, its CPU model the CPU ones at ~0.3
    "cold_selection_power": {"gpu": 8.0, "cpu": 1.0},
    # a cold draft's generations: on a GPU the climb that follows chooses the geometries
    "cold_genetic_iters": {"gpu": 1.0, "cpu": 3.0},
    # skip children the draft has met: two in five on a GPU (a ~65 ms replay each), one in ten on CPU
    "skip_seen_children": {"gpu": 1.0, "cpu": 0.0},
    # share of mutations redrawing a categorical decision (a CPU sketch's are unroll depths only)
    "categorical_mutate_prob": {"gpu": 0.2, "cpu": 0.0},
    # draw decision by decision and replay only draws that may pass VerifyGPUCode (screen.py)
    "screen_samples": {"gpu": 1.0, "cpu": 0.0},
    # fresh samples of a round with nothing carried over
    "cold_samples": {"gpu": 128.0, "cpu": 50.0},
    # first-round policy (first_round/); a CPU target has no geometry, fetch widths or ptxas
    "cold_geometry_share": {"gpu": 0.5, "cpu": 1.0},
    "widen_cold_fetches": {"gpu": 1.0, "cpu": 0.0},
    "cold_climb_starts": {"gpu": 4.0, "cpu": 0.0},
    "cold_batch_share": {"gpu": 0.5, "cpu": 1.0},
    "cold_ptxas_ties": {"gpu": 64.0, "cpu": 0.0},
    "cold_family_share": {"gpu": 0.25, "cpu": 0.0},
}
SHARES = ("cold_batch_share", "cold_family_share")  # shares of a batch: at most all of it


def value_type(hint) -> Tuple[type, bool]:
    """A field's declared type as (the type of its values, whether None is allowed):
    ``Optional[int]`` -> (int, True), ``float`` -> (float, False)."""
    declared = typing.get_args(hint) or (hint,)
    return next(t for t in declared if t is not type(None)), type(None) in declared


def _resolved(config, kind: str):
    """``config`` with each None field set to its default for ``kind`` ("gpu" or "cpu"), cast to
    the type the field is declared with (``Optional[int]`` -> int)."""
    types = typing.get_type_hints(type(config))
    values = {}
    for field in dataclasses.fields(config):
        if field.name in TARGET_DEFAULTS:
            value = getattr(config, field.name)
            value = float(value) if value is not None else TARGET_DEFAULTS[field.name][kind]
            cast, _ = value_type(types[field.name])
            values[field.name] = min(1.0, value) if field.name in SHARES else cast(value)
    return dataclasses.replace(config, **values)


@dataclasses.dataclass(frozen=True)
class PrunerConfig:
    """Pruner's round: the population, the analyzer draft (warm and cold evolutions), the verify
    batch (``eps_greedy`` random share, Droplet neighbours from round ``droplet_after``)."""

    population: int = 512
    draft_size: int = 256
    genetic_iters: int = 2
    cold_genetic_iters: Optional[int] = None
    cold_population: int = 384
    cold_selection_power: Optional[float] = None
    mutate_prob: float = 0.85
    init_measured_ratio: float = 0.1
    eps_greedy: float = 0.1
    droplet_after: int = 2
    droplet_share: float = 0.25
    droplet_neighbours: int = 64
    carry_over: int = 192
    fresh_samples: int = 128
    categorical_mutate_prob: Optional[float] = None
    skip_seen_children: Optional[bool] = None
    screen_samples: Optional[bool] = None
    cold_samples: Optional[int] = None
    sample_saturation: int = 64

    def resolved(self, kind: str) -> "PrunerConfig":
        return _resolved(self, kind)


@dataclasses.dataclass(frozen=True)
class FirstRoundConfig:
    """The tensor-core first-round policy (first_round/): the cold batch's geometry cap and tie
    order, the analyzer climb, fetch widening, the rule-family floor and the follow-up slices."""

    cold_geometry_share: Optional[float] = None
    cold_variant_band: float = 0.01
    widen_cold_fetches: Optional[bool] = None
    cold_climb_starts: Optional[int] = None
    cold_climb_steps: int = 3
    cold_climb_moves: int = 24
    cold_climb_per_family: bool = True
    cold_climb_per_instruction: bool = True
    cold_climb_transplants: int = 1
    cold_arranged_geometries: int = 1
    cold_ptxas_ties: Optional[int] = None
    cold_batch_share: Optional[float] = None
    follow_up_droplet_share: float = 0.5
    follow_up_slices: int = 2
    cold_family_share: Optional[float] = None

    def resolved(self, kind: str) -> "FirstRoundConfig":
        return _resolved(self, kind)
