"""PrunerSearch's parameters and their defaults (docs/search.md has the table).

A default of None is resolved per kind of target (GPU or CPU) from the tables below when the
strategy meets its tune context (``for_target``).
"""

import dataclasses

DEFAULTS = dict(
    population=512,
    draft_size=256,
    genetic_iters=2,
    cold_genetic_iters=None,
    cold_population=384,
    cold_selection_power=None,
    mutate_prob=0.85,
    init_measured_ratio=0.1,
    eps_greedy=0.1,
    droplet_after=2,
    droplet_share=0.25,
    droplet_neighbours=64,
    carry_over=192,
    fresh_samples=128,
    categorical_mutate_prob=None,
    skip_seen_children=None,
    cold_geometry_share=None,
    cold_variant_band=0.01,
    widen_cold_fetches=None,
    cold_climb_starts=None,
    cold_climb_steps=3,
    cold_climb_moves=24,
    cold_arranged_geometries=1,
    cold_ptxas_ties=None,
    cold_batch_share=None,
    follow_up_droplet_share=0.5,
    follow_up_slices=2,
    screen_samples=None,
    cold_samples=None,
    cold_family_share=None,
)
# The cold round's parent-selection power when none is given, by how far the analyzer is trusted:
# its GPU model ranks the real H100 records at Spearman 0.95, its CPU model the CPU ones at ~0.3.
COLD_SELECTION_POWER = {"gpu": 8.0, "cpu": 1.0}
# Generations of a cold round's draft when none is given: one on a GPU, where the analyzer climb that
# follows the draft chooses the picks' geometries (two, or none, gave the same odds at stock's best on
# the H100 matmul and conv2d records, in a third to a half more or less search; docs/search.md), and the
# one generation still mutates the categorical decisions the climb does not move; three on CPU, which
# has no climb and whose draft repeats few children (below).
COLD_GENETIC_ITERS = {"gpu": 1.0, "cpu": 3.0}
# Whether the draft's mutators skip a child whose decisions the draft has met (mutator.py), when not
# given: a GPU draft at selection power 8 repeats two children in five, each a ~65 ms replay of a
# tensor-core trace; a CPU draft repeats about one in ten, and the look-up costs more than it saves.
SKIP_SEEN_CHILDREN = {"gpu": 1.0, "cpu": 0.0}
# Share of the draft's mutations that redraw a categorical decision, when none is given (CPU sketches'
# categorical decisions are unroll depths, which MutateUnroll already covers).
CATEGORICAL_MUTATE_PROB = {"gpu": 0.2, "cpu": 0.0}
# Most of a cold round's batch one kernel geometry may take (geometry.py), when none is given; on a CPU
# the cold draft is diverse already (selection power 1) and the analyzer has no GPU geometry. Half, not a
# quarter: on the H100 matmul only the analyzer's favourite geometry measured at stock's best, about one
# member in ten, so its picks are the cold half's odds; the other half still hedges (docs/search.md).
COLD_GEOMETRY_SHARE = {"gpu": 0.5, "cpu": 1.0}
# Whether a cold round widens its picks' narrow operand fetches (fetch_width.py), when not given; CPU
# schedules have no cooperative fetches.
WIDEN_COLD_FETCHES = {"gpu": 1.0, "cpu": 0.0}
# How many of the cold draft's best geometries the analyzer climb starts from, when not given; on a
# CPU the analyzer ranks too loosely (Spearman ~0.3) for its local optimum to be worth measuring.
COLD_CLIMB_STARTS = {"gpu": 4.0, "cpu": 0.0}
# Share of a batch the cold round measures when none is given; the follow-up round measures the rest
# around the best of it. On a GPU the analyzer cannot rank the variants of its favourite geometry
# (the H100 records of one 128 x 128 tile measured 422-471 us at estimates within 2%), while one
# decision moved from a measured kernel reaches the fast ones; on a CPU, rounds are seconds long and
# the next ordinary round exploits soon enough.
COLD_BATCH_SHARE = {"gpu": 0.5, "cpu": 1.0}
# Whether fresh samples are drawn decision by decision and only the draws that may pass VerifyGPUCode
# are replayed (screen.py), when not given; most random tensor-core schedules break its limits, and
# a CPU target has no such check.
SCREEN_SAMPLES = {"gpu": 1.0, "cpu": 0.0}
# Fresh samples of a round with nothing carried over (the cold round, a resumed run's first), when
# not given: as many as stock's first population holds at least (init_min_unmeasured) where each
# costs a replay and most replays are rejected, more where the screen replays few draws in vain (GPU).
COLD_SAMPLES = {"gpu": 128.0, "cpu": 50.0}
# Tied members of a cold round's favourite geometry compiled for ptxas's register count (ptxas_ties.py)
# when not given, where nvcc is on PATH: the matmul's 36 arrangement and fetch-width ties and more,
# a few seconds on a 16-core GPU host; a CPU target has no ptxas.
COLD_PTXAS_TIES = {"gpu": 64.0, "cpu": 0.0}
# Least share of a cold batch each tensor-core rule family of the space takes (batch.with_family_floor)
# when none is given: the analyzer's two families have not been measured against each other on one
# GPU yet (docs/search.md); a CPU space has one family.
COLD_FAMILY_SHARE = {"gpu": 0.25, "cpu": 0.0}
MIN_FRESH_SAMPLES = 16


@dataclasses.dataclass
class TargetSettings:
    """The parameters whose default depends on the kind of target, resolved for one."""

    categorical_mutate_prob: float
    skip_seen_children: bool
    cold_genetic_iters: int
    cold_selection_power: float
    cold_geometry_share: float
    widen_cold_fetches: bool
    cold_climb_starts: int
    cold_batch_share: float
    screen_samples: bool
    cold_samples: int
    cold_ptxas_ties: int
    cold_family_share: float


def for_target(params: dict, kind: str) -> TargetSettings:
    """``params``' target-dependent values as given, or their defaults for ``kind`` ("gpu", "cpu")."""
    def value(name: str, defaults: dict) -> float:
        return float(params[name]) if params[name] is not None else defaults[kind]

    return TargetSettings(
        categorical_mutate_prob=value("categorical_mutate_prob", CATEGORICAL_MUTATE_PROB),
        skip_seen_children=bool(value("skip_seen_children", SKIP_SEEN_CHILDREN)),
        cold_genetic_iters=int(value("cold_genetic_iters", COLD_GENETIC_ITERS)),
        cold_selection_power=value("cold_selection_power", COLD_SELECTION_POWER),
        cold_geometry_share=value("cold_geometry_share", COLD_GEOMETRY_SHARE),
        widen_cold_fetches=bool(value("widen_cold_fetches", WIDEN_COLD_FETCHES)),
        cold_climb_starts=int(value("cold_climb_starts", COLD_CLIMB_STARTS)),
        cold_batch_share=min(1.0, value("cold_batch_share", COLD_BATCH_SHARE)),
        screen_samples=bool(value("screen_samples", SCREEN_SAMPLES)),
        cold_samples=int(value("cold_samples", COLD_SAMPLES)),
        cold_ptxas_ties=int(value("cold_ptxas_ties", COLD_PTXAS_TIES)),
        cold_family_share=min(1.0, value("cold_family_share", COLD_FAMILY_SHARE)),
    )
