"""PrunerSearch: draft with the static analyzer, verify with the learned model, exploit the best.

One round (``generate_measure_candidates``):

1. **Population** — the best measured schedules from the database (replayed with their decisions),
   the unmeasured draft members the model ranked highest last round (already sampled, mutated and
   post-processed, so they cost nothing to carry over), and random samples of the design space
   (MetaSchedule's C++ sampler, postprocessors applied) for the rest, fewer after round 0.
2. **Draft** — MetaSchedule's C++ genetic evolution (its mutators, its postprocessors) with the
   static analyzer as fitness keeps the ``draft_size`` most promising unmeasured schedules; a cold
   round (nothing of the workload measured yet) draws parents by the analyzer's score raised to
   ``cold_selection_power`` (8 on GPUs, 1 on CPUs, where the analyzer ranks worse) over
   ``cold_genetic_iters`` generations of ``cold_population``: the analyzer alone then chooses what
   is measured, so on a GPU the draft climbs harder in the same time. On a GPU the draft's mutators
   also redraw categorical decisions (``categorical_mutate_prob``, ``mutator.MutateCategorical``):
   MetaSchedule's own never change the operand fetch widths the sampler drew. A cold round on a
   GPU then climbs from the best draft member of each of the ``cold_climb_starts`` best geometries,
   one tile factor at a time, to what the analyzer estimates faster (``cold_climb_steps`` steps of up
   to ``cold_climb_moves`` neighbours, climb.py); what the climb visits joins the draft.
3. **Verify** — the tuning cost model (PaCM) scores the draft; the batch takes the best of them,
   an ``eps_greedy`` share of random draft members, and (from round ``droplet_after`` on) the
   neighbours of the best measured schedule that the model likes best (Droplet exploitation).
   A cold round on a GPU spreads its best picks over kernel geometries (``cold_geometry_share``,
   geometry.py), so one geometry the analyzer misjudged cannot take the whole batch, and widens
   the operand fetches of picks that fetch in 4 bytes or less (``widen_cold_fetches``,
   fetch_width.py), which the analyzer underrates.
4. Nothing measured before (same structural hash) is proposed again.
"""

from __future__ import annotations

import random
import time
from typing import List, Optional

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..tuning.records import mean_latency, measure_candidate, measured_batch
from .defaults import (CATEGORICAL_MUTATE_PROB, COLD_CLIMB_STARTS, COLD_GEOMETRY_SHARE, COLD_SELECTION_POWER,
                       DEFAULTS, FIRST_ROUND_SAMPLES, MIN_FRESH_SAMPLES, WIDEN_COLD_FETCHES)
from .geometry import capped_per_group


@derived_object
class PrunerSearch(PySearchStrategy):
    """Draft-then-verify search strategy for ``ms.tune_tir`` / ``tune_tasks`` / ``tune_relax``.

    ``timings`` (a list, shared with clones) receives one dict per round with the seconds spent in
    sampling, draft, verify and droplet, and how many candidates each stage saw.
    ``pretrained`` (a file from ``ms-pruner train``) makes the search verify with its own
    momentum-adapted PaCM (MoA), updated after every measured batch, whatever cost model the
    tuning call carries; without it the tuning call's cost model verifies.
    """

    def __init__(self, population: int = DEFAULTS["population"], draft_size: int = DEFAULTS["draft_size"],
                 genetic_iters: int = DEFAULTS["genetic_iters"],
                 cold_genetic_iters: int = DEFAULTS["cold_genetic_iters"],
                 cold_population: int = DEFAULTS["cold_population"],
                 cold_selection_power: Optional[float] = DEFAULTS["cold_selection_power"],
                 mutate_prob: float = DEFAULTS["mutate_prob"],
                 init_measured_ratio: float = DEFAULTS["init_measured_ratio"],
                 eps_greedy: float = DEFAULTS["eps_greedy"], droplet_after: int = DEFAULTS["droplet_after"],
                 droplet_share: float = DEFAULTS["droplet_share"],
                 droplet_neighbours: int = DEFAULTS["droplet_neighbours"], carry_over: int = DEFAULTS["carry_over"],
                 fresh_samples: int = DEFAULTS["fresh_samples"],
                 categorical_mutate_prob: Optional[float] = DEFAULTS["categorical_mutate_prob"],
                 cold_geometry_share: Optional[float] = DEFAULTS["cold_geometry_share"],
                 widen_cold_fetches: Optional[bool] = DEFAULTS["widen_cold_fetches"],
                 cold_climb_starts: Optional[int] = DEFAULTS["cold_climb_starts"],
                 cold_climb_steps: int = DEFAULTS["cold_climb_steps"],
                 cold_climb_moves: int = DEFAULTS["cold_climb_moves"], seed: int = 0,
                 pretrained: Optional[str] = None, momentum: float = 0.9, timings: Optional[list] = None):
        super().__init__()
        self.params = dict(population=population, draft_size=draft_size, genetic_iters=genetic_iters,
                           cold_genetic_iters=cold_genetic_iters, cold_population=cold_population,
                           cold_selection_power=cold_selection_power,
                           mutate_prob=mutate_prob,
                           init_measured_ratio=init_measured_ratio,
                           eps_greedy=eps_greedy, droplet_after=droplet_after, droplet_share=droplet_share,
                           droplet_neighbours=droplet_neighbours, carry_over=carry_over,
                           fresh_samples=fresh_samples, categorical_mutate_prob=categorical_mutate_prob,
                           cold_geometry_share=cold_geometry_share, widen_cold_fetches=widen_cold_fetches,
                           cold_climb_starts=cold_climb_starts, cold_climb_steps=cold_climb_steps,
                           cold_climb_moves=cold_climb_moves, seed=seed, pretrained=pretrained,
                           momentum=momentum)
        self.timings = timings if timings is not None else []
        self.rng = random.Random(seed)
        self.context = None
        self.inner = None
        self.inner_cold = None
        self.space = None
        self.analyzer = None
        self.psa = None  # the analyzer as fitness of the warm draft (selection power 1)
        self.psa_cold = None  # ... and of the cold draft (cold_selection_power)
        self.draft_context = None  # the context the draft evolves in (with MutateCategorical on a GPU)
        self.cold_geometry_share = 1.0
        self.widen_cold_fetches = False
        self.cold_climb_starts = 0
        self.estimates = {}  # this round's analyzer estimates by structural hash (geometry, fetch widths)
        self._keys = {}  # this round's structural hashes by schedule object (id -> (schedule, hash))

    # -- MetaSchedule plumbing ------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        from ..analysis import StaticAnalyzer
        from .space import DesignSpace
        from .mutator import with_categorical_mutator
        from .psa_model import PSACostModel

        self.context = context
        self.space = DesignSpace(context.mod, context.target, context=context)
        self.analyzer = StaticAnalyzer.for_target(context.target)
        kind = "gpu" if self.analyzer.is_gpu else "cpu"

        def param(name: str, defaults: dict) -> float:
            """The parameter as given, or its default for this kind of target when it is None."""
            value = self.params[name]
            return float(value) if value is not None else defaults[kind]

        share = param("categorical_mutate_prob", CATEGORICAL_MUTATE_PROB)
        self.draft_context = with_categorical_mutator(context, share, self.params["seed"]) if share > 0 else context
        self.cold_geometry_share = param("cold_geometry_share", COLD_GEOMETRY_SHARE)
        self.widen_cold_fetches = bool(param("widen_cold_fetches", WIDEN_COLD_FETCHES))
        self.cold_climb_starts = int(param("cold_climb_starts", COLD_CLIMB_STARTS))
        self.psa = PSACostModel(self.analyzer)
        self.psa_cold = PSACostModel(self.analyzer, power=param("cold_selection_power", COLD_SELECTION_POWER))
        self.inner = self._evolution(self.params["population"], self.params["genetic_iters"])
        self.inner_cold = self._evolution(self.params["cold_population"], self.params["cold_genetic_iters"])

    def _evolution(self, population: int, generations: int):
        """MetaSchedule's evolution, used only for sampling and for evolving with the analyzer."""
        from tvm.s_tir import meta_schedule as ms

        evolution = ms.search_strategy.EvolutionarySearch(
            population_size=population,
            init_measured_ratio=0.0,
            init_min_unmeasured=min(MIN_FRESH_SAMPLES, population),
            genetic_num_iters=generations,
            genetic_mutate_prob=self.params["mutate_prob"],
            eps_greedy=0.0,
        )
        evolution._initialize_with_tune_context(self.draft_context)  # pylint: disable=protected-access
        return evolution

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        from tvm.s_tir import meta_schedule as ms

        self.max_trials = int(max_trials)
        self.per_iter = int(num_trials_per_iter)
        self.database = database if database is not None else ms.database.MemoryDatabase()
        self.cost_model = cost_model
        self.own_model = None
        if self.params["pretrained"]:
            from ..cost_model import PaCM

            self.own_model = PaCM(pretrained=self.params["pretrained"], momentum=self.params["momentum"],
                                  seed=self.params["seed"])
            self.cost_model = self.own_model
        self.trials = 0
        self.round = 0
        self.measured = set()
        self.best = None  # (latency, trace)
        self.carry = []  # unmeasured draft members, best-ranked first
        for evolution, fitness in ((self.inner, self.psa), (self.inner_cold, self.psa_cold)):
            evolution.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database=self.database,
                                 cost_model=fitness)
        workload = self.database.commit_workload(self.context.mod)
        schedules, latencies = [], []
        for record in self.database.get_top_k(workload, 1 << 30):
            sch, latency = self.space.replay(record.trace, seed=1), mean_latency(record)
            self._note_measured(record.trace, latency, sch.mod if sch is not None else None)
            if sch is not None:
                schedules.append(sch)
                latencies.append(latency)
        if self.own_model is not None and schedules:  # a resumed run: the MoA model learns what was measured
            self.own_model.update(self.context, *measured_batch(schedules, latencies))

    def post_tuning(self) -> None:
        for evolution in (self.inner, self.inner_cold):
            evolution.post_tuning()

    def clone(self):
        return PrunerSearch(**self.params, timings=self.timings)

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        for candidate, result in zip(measure_candidates, results):
            latency = mean_latency(result) if result.error_msg is None else float("inf")
            self._note_measured(candidate.sch.trace, latency, candidate.sch.mod)
        if self.own_model is not None:
            self.own_model.update(self.context, measure_candidates, results)
            self.timings[-1]["verifier_records"] = len(self.own_model.core.samples)
        for evolution in (self.inner, self.inner_cold):
            evolution.notify_runner_results(measure_candidates, results)

    # -- the round ------------------------------------------------------------------------
    def generate_measure_candidates(self):
        from tvm.s_tir import meta_schedule as ms

        if self.trials >= self.max_trials:
            return None
        batch = min(self.per_iter, self.max_trials - self.trials)
        timing = {"round": self.round, "task": str(self.context.task_name),
                  "verifier": "own MoA PaCM" if self.own_model is not None else "tuning cost model"}
        self.estimates, self._keys = {}, {}
        start = time.perf_counter()
        population, timing["carried"] = self._population()
        timing["sample_s"] = time.perf_counter() - start
        timing["population"] = len(population)

        start = time.perf_counter()
        cold = self.best is None
        fitness = self.psa_cold if cold else self.psa
        psa_seconds = fitness.seconds
        timing["generations"] = self.params["cold_genetic_iters" if cold else "genetic_iters"]
        timing["selection_power"] = fitness.power
        draft = list(ms._ffi_api.SearchStrategyEvolutionarySearchEvolveWithCostModel(  # pylint: disable=protected-access
            self.inner_cold if cold else self.inner, population, self.params["draft_size"]))
        draft = [s for s in draft if self._key_of(s) not in self.measured]
        timing["draft_s"] = time.perf_counter() - start
        timing["draft_analyzer_s"] = fitness.seconds - psa_seconds
        timing["draft"] = len(draft)
        if cold and self.cold_climb_starts > 0:
            start = time.perf_counter()
            climbed = self._climb(draft)
            draft.extend(climbed)
            timing["climb_s"] = time.perf_counter() - start
            timing["climbed"] = len(climbed)

        start = time.perf_counter()
        droplet = []
        if self.best is not None and self.round >= self.params["droplet_after"]:
            from .droplet import neighbours

            droplet = [s for s in neighbours(self.space, self.best[1], self.params["droplet_neighbours"],
                                             self.rng.randrange(1 << 30)) if self._key_of(s) not in self.measured]
        timing["droplet_s"] = time.perf_counter() - start
        timing["droplet"] = len(droplet)

        start = time.perf_counter()
        picks = self._select(draft, droplet, batch, geometry_cap=self._cold_geometry_cap(batch) if cold else None)
        timing["verify_s"] = time.perf_counter() - start
        if cold and self.widen_cold_fetches:
            start = time.perf_counter()
            picks, timing["widened"] = self._widen_fetches(picks)
            timing["widen_s"] = time.perf_counter() - start
        timing["picked"] = len(picks)
        self.timings.append(timing)
        self.round += 1
        if not picks:
            return None
        for sch in picks:
            self.measured.add(self._key_of(sch))
        return [measure_candidate(sch) for sch in picks]

    def _population(self):
        """(schedules entering the draft, how many of them were carried over from last round)."""
        from tvm.s_tir import meta_schedule as ms

        population = []
        if self.best is not None:
            workload = self.database.commit_workload(self.context.mod)
            top = self.database.get_top_k(workload, int(self.params["population"] * self.params["init_measured_ratio"]))
            for record in top:
                sch = self.space.replay(record.trace, seed=self.rng.randrange(1, 1 << 30))
                if sch is not None:
                    population.append(sch)
        carried = [s for s in self.carry if self._key_of(s) not in self.measured]
        carried = carried[:max(0, self.params["population"] - len(population))]
        population.extend(carried)
        missing = self.params["population"] - len(population)
        if carried:
            missing = min(missing, self.params["fresh_samples"])
        # The C++ sampler stops once MIN_FRESH_SAMPLES survive; with nothing to carry, keep asking
        # until the population is as diverse as stock's first one (init_min_unmeasured = 50).
        wanted = MIN_FRESH_SAMPLES if carried else min(missing, FIRST_ROUND_SAMPLES)
        fresh = []
        for _ in range(FIRST_ROUND_SAMPLES // MIN_FRESH_SAMPLES + 1):
            if len(fresh) >= wanted or missing - len(fresh) <= 0:
                break
            fresh.extend(ms._ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(  # pylint: disable=protected-access
                self.inner, missing - len(fresh)))
        population.extend(fresh)
        return population, len(carried)

    def _climb(self, draft: List) -> List:
        """New unmeasured schedules the analyzer climb visits (climb.py)."""
        from .climb import climb_from_best_geometries

        seen = {self._key_of(sch) for sch in draft} | self.measured
        out = []
        for sch in climb_from_best_geometries(draft, self.space, lambda s: self._estimate(s).latency_s, self._geometry,
                                              self.cold_climb_starts, self.params["cold_climb_steps"],
                                              self.params["cold_climb_moves"], self.rng):
            key = self._key_of(sch)
            if key not in seen:
                seen.add(key)
                out.append(sch)
        return out

    def _cold_geometry_cap(self, batch: int) -> Optional[int]:
        if self.cold_geometry_share >= 1.0:
            return None
        return max(1, int(round(batch * self.cold_geometry_share)))

    def _select(self, draft: List, droplet: List, batch: int, geometry_cap: Optional[int] = None) -> List:
        """Best of the draft and of the droplet neighbours by the cost model, plus eps random.

        ``geometry_cap`` (cold rounds) limits the best-ranked picks that share one kernel geometry
        (geometry.py): the analyzer alone ranks a cold round, and its favourite's variants would
        otherwise fill the batch. Picks over the cap come back only when the draft has too few
        geometries to fill the batch.
        """
        n_droplet = min(len(droplet), int(round(batch * self.params["droplet_share"]))) if droplet else 0
        n_random = int(round((batch - n_droplet) * self.params["eps_greedy"]))
        n_best = batch - n_droplet - n_random
        picks, seen = [], set()

        def take(schedules, count):
            for sch in schedules:
                if count <= 0 or len(picks) >= batch:
                    break
                key = self._key_of(sch)
                if key in seen or key in self.measured:
                    continue
                seen.add(key)
                picks.append(sch)
                count -= 1

        take(self._rank(droplet), n_droplet)
        ranked_draft = self._rank(draft)
        if geometry_cap is not None:
            ranked_draft = capped_per_group(ranked_draft, geometry_cap, self._geometry, batch)
        take(ranked_draft, n_best)
        rest = [s for s in draft if self._key_of(s) not in seen]
        self.rng.shuffle(rest)
        take(rest, n_random)
        take(ranked_draft, batch - len(picks))  # top up when a stage came up short
        self.carry = [s for s in ranked_draft if self._key_of(s) not in seen][:self.params["carry_over"]]
        return picks

    def _widen_fetches(self, picks: List):
        from .fetch_width import widen_narrow_picks

        return widen_narrow_picks(picks, self.space, self._estimate, self._key_of, self.measured, self.rng)

    def _estimate(self, sch):
        """The analyzer's estimate of ``sch``, computed once a round."""
        key = self._key_of(sch)
        if key not in self.estimates:
            self.estimates[key] = self.analyzer.estimate(sch.mod)
        return self.estimates[key]

    def _geometry(self, sch):
        """The analyzer's view of a schedule's tiling (``analysis.kernel_geometry``); the tile
        sizes on a CPU."""
        from ..analysis import kernel_geometry
        from .droplet import tile_decisions

        return kernel_geometry(self._estimate(sch).features) or tile_decisions(sch.trace)

    def _rank(self, schedules: List) -> List:
        if not schedules:
            return []
        if self.cost_model is None:
            return list(schedules)
        scores = self.cost_model.predict(self.context, [measure_candidate(s) for s in schedules])
        order = sorted(range(len(schedules)), key=lambda i: -float(scores[i]))
        return [schedules[i] for i in order]

    def _note_measured(self, trace, latency: float, mod) -> None:
        if mod is not None:
            self.measured.add(self._key(mod))
        if latency < 1e9 and (self.best is None or latency < self.best[0]):
            self.best = (latency, trace)

    def _key_of(self, sch) -> int:
        """``_key(sch.mod)``, hashed once per schedule object a round (a round asks for the key of
        a draft member in the draft filter, the climb, the estimate cache and the selection)."""
        entry = self._keys.get(id(sch))
        if entry is None or entry[0] is not sch:
            entry = (sch, self._key(sch.mod))
            self._keys[id(sch)] = entry
        return entry[1]

    @staticmethod
    def _key(mod) -> int:
        import tvm_ffi

        return int(tvm_ffi.structural_hash(mod))
