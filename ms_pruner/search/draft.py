"""The draft: MetaSchedule's C++ genetic evolution with the static analyzer as its fitness.

PrunerSearch keeps two evolutions over one tuning context: the warm one (``population``,
``genetic_iters``, selection power 1) and the cold one (``cold_population``, the target's
``cold_genetic_iters`` and ``cold_selection_power``), which chooses what a round with nothing
measured yet measures. On a GPU their mutators also redraw categorical decisions and skip the
children the draft has met (mutator.py). The evolutions also sample the design space for the
population (screen.fresh_samples) and learn each measured batch as stock MetaSchedule's would.
"""

from __future__ import annotations

from typing import Callable, List

from tvm.s_tir import meta_schedule as ms

from ..cost_model.analyzer_model import PSACostModel
from .config import MIN_FRESH_SAMPLES
from .mutator import SeenDecisions, draft_mutators
from .screen import fresh_samples


class AnalyzerDraft:
    """The two analyzer-driven evolutions of one tuning context, and the round log fields of a draft."""

    def __init__(self, context, analyzer, config, seed: int):
        self.config = config  # a resolved PrunerConfig
        share = config.categorical_mutate_prob
        self.seen = SeenDecisions() if config.skip_seen_children else None  # what the mutators skip
        if share > 0 or self.seen is not None:
            self.context = draft_mutators(context, share, seed, self.seen)
        else:
            self.context = context
        self.fitness = PSACostModel(analyzer)
        self.fitness_cold = PSACostModel(analyzer, power=config.cold_selection_power, scores=self.fitness.scores)
        self.warm = self._evolution(config.population, config.genetic_iters)
        self.cold = self._evolution(config.cold_population, config.cold_genetic_iters)

    def _evolution(self, population: int, generations: int):
        """MetaSchedule's evolution, used only for sampling and for evolving with the analyzer."""
        evolution = ms.search_strategy.EvolutionarySearch(
            population_size=population,
            init_measured_ratio=0.0,
            init_min_unmeasured=min(MIN_FRESH_SAMPLES, population),
            genetic_num_iters=generations,
            genetic_mutate_prob=self.config.mutate_prob,
            eps_greedy=0.0,
        )
        evolution._initialize_with_tune_context(self.context)  # pylint: disable=protected-access
        return evolution

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database) -> None:
        for evolution, fitness in ((self.warm, self.fitness), (self.cold, self.fitness_cold)):
            evolution.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database=database,
                                 cost_model=fitness)

    def post_tuning(self) -> None:
        for evolution in (self.warm, self.cold):
            evolution.post_tuning()

    def notify_runner_results(self, measure_candidates, results) -> None:
        for evolution in (self.warm, self.cold):
            evolution.notify_runner_results(measure_candidates, results)

    def note_measured(self, trace) -> None:
        if self.seen is not None:
            self.seen.note_measured(trace)

    def population(self, best_measured: List, carry: List, sampler, rng):
        """(the schedules entering the draft, how many were carried over): ``best_measured``
        (replayed), then the unmeasured ``carry`` of last round, then fresh samples for the rest:
        at least MIN_FRESH_SAMPLES with a carry, and with none the cold round's ``cold_samples``."""
        config = self.config
        population = list(best_measured)
        carried = carry[:max(0, config.population - len(population))]
        population.extend(carried)
        missing = config.population - len(population)
        if carried:
            missing = min(missing, config.fresh_samples)
        wanted = min(missing, MIN_FRESH_SAMPLES if carried else config.cold_samples)
        population.extend(fresh_samples(sampler, self.warm, wanted, missing, rng))
        return population, len(carried)

    def evolve(self, population: List, cold: bool, keep: Callable, stats) -> List:
        """Up to ``draft_size`` schedules evolved from ``population`` that ``keep`` accepts, best
        estimated first; the draft's seconds, analyzer seconds and counts go into ``stats``."""
        fitness = self.fitness_cold if cold else self.fitness
        seconds, calls, estimated = fitness.seconds, fitness.calls, fitness.estimated
        with stats.stage("draft"):
            stats["generations"] = self.config.cold_genetic_iters if cold else self.config.genetic_iters
            stats["selection_power"] = fitness.power
            if self.seen is not None:
                self.seen.start_draft()
            evolve = ms._ffi_api.SearchStrategyEvolutionarySearchEvolveWithCostModel  # pylint: disable=protected-access
            draft = list(evolve(self.cold if cold else self.warm, population, self.config.draft_size))
            draft = [s for s in draft if keep(s)]
        stats["draft_analyzer_s"] = fitness.seconds - seconds
        stats["draft_scored"] = fitness.calls - calls
        stats["draft_estimated"] = fitness.estimated - estimated
        if self.seen is not None:
            stats["draft_children"], stats["draft_children_skipped"] = self.seen.new, self.seen.repeated
        return draft
