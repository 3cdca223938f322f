"""PrunerSearch's parameters and their defaults (docs/search.md has the table).

A default of None is resolved per kind of target (GPU or CPU) from the tables below when the
strategy meets its tune context.
"""

DEFAULTS = dict(
    population=512,
    draft_size=256,
    genetic_iters=2,
    cold_genetic_iters=3,
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
    cold_geometry_share=None,
    widen_cold_fetches=None,
    cold_climb_starts=None,
    cold_climb_steps=3,
    cold_climb_moves=24,
    cold_batch_share=None,
    follow_up_droplet_share=0.5,
)
# The cold round's parent-selection power when none is given, by how far the analyzer is trusted:
# its GPU model ranks the real H100 records at Spearman 0.95, its CPU model the CPU ones at ~0.3.
COLD_SELECTION_POWER = {"gpu": 8.0, "cpu": 1.0}
# Share of the draft's mutations that redraw a categorical decision, when none is given (CPU sketches'
# categorical decisions are unroll depths, which MutateUnroll already covers).
CATEGORICAL_MUTATE_PROB = {"gpu": 0.2, "cpu": 0.0}
# Most of a cold round's batch one kernel geometry may take (geometry.py), when none is given; on a CPU
# the cold draft is diverse already (selection power 1) and the analyzer has no GPU geometry.
COLD_GEOMETRY_SHARE = {"gpu": 0.25, "cpu": 1.0}
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
MIN_FRESH_SAMPLES = 16
FIRST_ROUND_SAMPLES = 50
