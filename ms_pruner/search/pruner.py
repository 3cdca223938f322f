"""PrunerSearch: draft with the static analyzer, verify with the learned model, exploit the best.

One round (``generate_measure_candidates``; docs/search.md has every parameter):

1. **Population**: the best measured schedules (replayed), last round's unmeasured draft members
   (free to carry over), and fresh samples for the rest (on a GPU drawn decision by decision and
   replayed only where VerifyGPUCode's limits may hold: screen.py; else MetaSchedule's C++ sampler).
2. **Draft** (draft.py): MetaSchedule's C++ genetic evolution with the analyzer as fitness keeps the
   ``draft_size`` most promising unmeasured schedules. A cold round (nothing measured yet) evolves
   longer with sharper parent choice (``cold_selection_power``) since the analyzer alone chooses
   what it measures; on a GPU the mutators also redraw categorical decisions (mutator.py) and the
   cold draft climbs from its best geometries one tile factor at a time (climb.py) and adds the wide
   fetch-width variants of each one's best members, as many as its capped picks need (fetch_width.py),
   and the favourite's other fragment arrangements (arrangement.py).
3. **Verify**: the tuning cost model (PaCM) ranks the draft; the batch takes its best, an
   ``eps_greedy`` random share, and from round ``droplet_after`` on the best-ranked Droplet
   neighbours of the best measured schedule (droplet.py). A cold batch on a GPU is spread over
   kernel geometries, each taking its fetch-width variants and arrangements that the analyzer
   estimates as ties in turn (geometry.py), those ptxas allots fewer registers first (tie_order.py),
   and its narrow operand fetches are widened (fetch_width.py).
4. Nothing measured before (same structural hash) is proposed again.

On a GPU the cold round measures only ``cold_batch_share`` (half) of a batch; the **follow-up**
rounds (follow_up.py) measure the rest without sampling or evolving: the cold draft's unpicked
members, ranked by the model that has learned the batch so far, and the Droplet neighbours of the
best measured. The analyzer cannot tell apart the variants of its favourite geometry that measure
a few percent apart; one decision moved from the best measured kernel can.
"""

from __future__ import annotations

import collections
import random
import time
from typing import Callable, List, Optional

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..analysis import ANALYSES
from ..analysis.copies import COPY_MEMORY
from ..database.records import mean_latency, measure_candidate, measured_batch, records_for
from ..intrinsics import register_tensor_intrinsics
from .batch import BatchRules, compose_batch, with_family_floor
from .candidates import CandidateFacts, structural_key
from .defaults import DEFAULTS, MIN_FRESH_SAMPLES, for_target
from .follow_up import FollowUp, resumed_follow_up, slice_sizes
from .geometry import capped_per_group
from .same_kernel import SameKernels
from .tie_order import TieOrder


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
                 cold_genetic_iters: Optional[int] = DEFAULTS["cold_genetic_iters"],
                 cold_population: int = DEFAULTS["cold_population"],
                 cold_selection_power: Optional[float] = DEFAULTS["cold_selection_power"],
                 mutate_prob: float = DEFAULTS["mutate_prob"],
                 init_measured_ratio: float = DEFAULTS["init_measured_ratio"],
                 eps_greedy: float = DEFAULTS["eps_greedy"], droplet_after: int = DEFAULTS["droplet_after"],
                 droplet_share: float = DEFAULTS["droplet_share"],
                 droplet_neighbours: int = DEFAULTS["droplet_neighbours"], carry_over: int = DEFAULTS["carry_over"],
                 fresh_samples: int = DEFAULTS["fresh_samples"],
                 categorical_mutate_prob: Optional[float] = DEFAULTS["categorical_mutate_prob"],
                 skip_seen_children: Optional[bool] = DEFAULTS["skip_seen_children"],
                 cold_geometry_share: Optional[float] = DEFAULTS["cold_geometry_share"],
                 cold_variant_band: float = DEFAULTS["cold_variant_band"],
                 widen_cold_fetches: Optional[bool] = DEFAULTS["widen_cold_fetches"],
                 cold_climb_starts: Optional[int] = DEFAULTS["cold_climb_starts"],
                 cold_climb_steps: int = DEFAULTS["cold_climb_steps"],
                 cold_climb_moves: int = DEFAULTS["cold_climb_moves"],
                 cold_arranged_geometries: int = DEFAULTS["cold_arranged_geometries"],
                 cold_ptxas_ties: Optional[int] = DEFAULTS["cold_ptxas_ties"],
                 cold_batch_share: Optional[float] = DEFAULTS["cold_batch_share"],
                 follow_up_droplet_share: float = DEFAULTS["follow_up_droplet_share"],
                 follow_up_slices: int = DEFAULTS["follow_up_slices"],
                 screen_samples: Optional[bool] = DEFAULTS["screen_samples"],
                 cold_samples: Optional[int] = DEFAULTS["cold_samples"],
                 cold_family_share: Optional[float] = DEFAULTS["cold_family_share"], seed: int = 0,
                 pretrained: Optional[str] = None, momentum: float = 0.9, timings: Optional[list] = None):
        # Every argument but ``timings`` (shared, not copied), as given: clone() passes them on.
        params = {name: value for name, value in locals().items() if name not in ("self", "timings", "__class__")}
        super().__init__()
        register_tensor_intrinsics()  # before ms.tune_tir's TuneContext imports them, ten times slower
        self.params = params
        self.timings = timings if timings is not None else []
        self.rng = random.Random(seed)
        self.context = None
        self.draft = None  # the analyzer-driven evolutions (draft.py)
        self.space = None
        self.analyzer = None
        self.settings = None  # the parameters that depend on the kind of target, resolved (defaults.py)
        self.follow_up = None  # what the cold round left for the follow-up rounds to measure (follow_up.py)
        self.sampler = None  # fresh samples screened against VerifyGPUCode's limits (screen.py), on a GPU
        self.facts = None  # each schedule's hash, estimate and geometry, found once a round (candidates.py)
        self.tie_order = None  # how a capped batch orders a geometry's ties (tie_order.py)

    # -- MetaSchedule plumbing ------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        from ..analysis import StaticAnalyzer
        from .draft import AnalyzerDraft
        from .space import DesignSpace

        self.context = context
        self.space = DesignSpace(context.mod, context.target, context=context)
        self.analyzer = StaticAnalyzer.for_target(context.target, memory=ANALYSES)
        self.facts = CandidateFacts(self.analyzer)
        self.settings = settings = for_target(self.params, "gpu" if self.analyzer.is_gpu else "cpu")
        self.tie_order = TieOrder(self.facts, context.target, int(context.num_threads),
                                  self.params["cold_variant_band"], settings.cold_ptxas_ties)
        self.draft = AnalyzerDraft(context, self.analyzer, settings, self.params)
        if settings.screen_samples and self.analyzer.is_gpu:
            from .screen import ScreenedSampler

            self.sampler = ScreenedSampler.for_target(self.space, self.analyzer, context.target)

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
        self.measured = set()
        self.same_kernels = SameKernels(self.context.target)  # unroll depths that change nothing (same_kernel.py)
        self.best = None  # (latency, trace)
        self.carry = []  # unmeasured draft members, best-ranked first
        self.follow_up = None
        self.draft.pre_tuning(max_trials, num_trials_per_iter, design_spaces, self.database)
        workload = self.database.commit_workload(self.context.mod)
        schedules, latencies = [], []
        records = list(self.database.get_top_k(workload, 1 << 30))
        for record, sch in zip(records, self.space.replay_many([r.trace for r in records], [1] * len(records))):
            latency = mean_latency(record)
            self._note_measured(record.trace, latency, sch.mod if sch is not None else None)
            if sch is not None:
                schedules.append(sch)
                latencies.append(latency)
        # A resumed run goes on counting rounds (batches of this size) where the earlier calls left
        # off, so Droplet starts when it would have in one call (droplet_after). Its failed records
        # count too (get_top_k leaves them out).
        tried = len(records_for(self.database, self.context.mod, self.context.target))
        self.round = -(-max(tried, len(self.measured)) // max(1, self.per_iter))
        if schedules:
            # An earlier call that ended inside the first batch, after its cold half: this one measures the rest first.
            self.follow_up = resumed_follow_up(self.per_iter, self._cold_trials(self.per_iter), tried,
                                               self.params["follow_up_slices"], map(self.facts.geometry, schedules))
        if self.own_model is not None and schedules:  # a resumed run: the MoA model learns what was measured
            self.own_model.update(self.context, *measured_batch(schedules, latencies))

    def post_tuning(self) -> None:
        self.draft.post_tuning()

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
        self.draft.notify_runner_results(measure_candidates, results)

    # -- the round ------------------------------------------------------------------------
    def generate_measure_candidates(self):
        if self.trials >= self.max_trials:
            return None
        left = self.max_trials - self.trials
        follow_up, self.follow_up = self.follow_up, None
        header = {"round": self.round, "task": str(self.context.task_name),
                  "verifier": "own MoA PaCM" if self.own_model is not None else "tuning cost model"}
        timing, picks = dict(header), []
        before = self._round_counters()
        if follow_up is not None and self.best is not None:
            picks = self._follow_up_round(follow_up, min(follow_up.sizes[0], left), timing)
        if not picks:  # no follow-up due, or nothing left to follow up with: search anew
            timing = dict(header)
            # A cold half that measured nothing valid leaves no best to follow up: the rest of its
            # batch is searched cold at once, not halved again.
            batch = min(follow_up.trials if follow_up is not None else self.per_iter, left)
            picks = self._searched_round(batch, timing, split=follow_up is None)
        timing["picked"] = len(picks)
        timing.update({k: v - before[k] for k, v in self._round_counters().items()})
        self.timings.append(timing)
        self.round += 1
        if not picks:
            return None
        for sch in picks:
            self.measured.add(self.facts.key(sch))
        return [measure_candidate(sch) for sch in picks]

    def _searched_round(self, batch: int, timing: dict, split: bool = True) -> List:
        """Sample, draft, (climb,) verify: the picks of an ordinary round or of a cold one (of which
        a GPU measures ``cold_batch_share`` when ``split``, leaving the rest to the follow-up)."""
        self.facts.new_round()
        cold = self.best is None
        full_batch = batch
        if cold and split:
            batch = self._cold_trials(batch)
        draft = self._draft(cold, batch, timing)
        droplet = self._droplet(timing, self.round >= self.params["droplet_after"])
        start = time.perf_counter()
        rules = BatchRules(batch, self.params["droplet_share"], self.params["eps_greedy"],
                           self._cold_geometry_cap(batch) if cold else None)
        picks = self._select(draft, droplet, rules, timing, each_family=cold)
        if cold:
            picks = self._family_floor(picks, batch, timing)
        timing["verify_s"] = time.perf_counter() - start
        if cold and self.settings.widen_cold_fetches:
            start = time.perf_counter()
            picks, timing["widened"] = self._widen_fetches(picks, self.measured)
            timing["widen_s"] = time.perf_counter() - start
        if cold and picks and batch < full_batch:
            self.follow_up = FollowUp(slice_sizes(full_batch - len(picks), self.params["follow_up_slices"]),
                                      collections.Counter(map(self.facts.geometry, picks)))
            timing["follow_up_due"] = self.follow_up.sizes[0]
        return picks

    def _cold_trials(self, batch: int) -> int:
        return max(1, int(round(batch * self.settings.cold_batch_share)))

    def _draft(self, cold: bool, batch: int, timing: dict) -> List:
        """Sample the population, evolve it with the analyzer, and in a cold round climb from the
        draft's best geometries: the unmeasured candidates a round chooses its picks from."""
        start = time.perf_counter()
        before = self._counters()
        population, timing["carried"] = self._population()
        timing["sample_s"] = time.perf_counter() - start
        if self.sampler is not None:  # the sampler's replays, and the analyses and copy blocks they read
            timing.update({f"sample_{k}": v - before[k] for k, v in self._counters().items()})
        timing["population"] = len(population)

        draft = self.draft.evolve(population, cold, lambda s: self.facts.key(s) not in self.measured, timing)
        timing["draft"] = len(draft)
        if cold and self.settings.cold_climb_starts > 0:
            start, replays = time.perf_counter(), self.space.replays
            climbed, variants, arranged = self._climb(draft, batch)
            draft.extend(climbed + variants + arranged)
            timing["climb_s"] = time.perf_counter() - start
            timing["climb_replayed"], timing["climb_valid"] = self.space.replays_since(replays)
            timing["climbed"], timing["fetch_variants"] = len(climbed), len(variants)
            timing["arrangement_variants"] = len(arranged)
        return draft

    def _follow_up_round(self, pending: FollowUp, batch: int, timing: dict) -> List:
        """A slice of the rest of a cold batch (the next one left due): no sampling or evolution,
        the cold draft's unpicked members ranked by the model that learned the batch so far, and
        the best measured's neighbours. Draft picks are still chosen mostly by the analyzer, so the
        geometry cap spans the whole split batch and narrow fetches are widened, as in the cold
        round; a neighbour is measured as built (its one changed decision is the point) and counts
        toward no cap. A call resumed after a cold half (``pre_tuning``) has no cold draft: a warm
        draft stands in, with the same rules."""
        timing["follow_up"] = True
        if pending.resumed:  # a new process carries no draft over: a warm one stands in for it
            self.facts.new_round()
            draft = self._draft(False, batch, timing)
        else:
            draft = [s for s in self.carry if self.facts.key(s) not in self.measured]
            timing.update(carried=len(draft), population=0, sample_s=0.0, draft_s=0.0, draft=len(draft), generations=0)
        droplet = self._droplet(timing, True)
        start = time.perf_counter()
        rules = BatchRules(batch, self.params["follow_up_droplet_share"], self.params["eps_greedy"],
                           self._cold_geometry_cap(self.per_iter), pending.geometries)
        picks = self._select(draft, droplet, rules, timing, each_family=True)
        timing["verify_s"] = time.perf_counter() - start
        neighbours = frozenset(self.facts.key(s) for s in droplet)
        if self.settings.widen_cold_fetches:
            start = time.perf_counter()
            picks, timing["widened"] = self._widen_fetches(picks, self.measured | neighbours, kept=neighbours)
            timing["widen_s"] = time.perf_counter() - start
        drafted = [self.facts.geometry(s) for s in picks if self.facts.key(s) not in neighbours]
        self.follow_up = pending.after(drafted) if picks else None
        if self.follow_up is not None:
            timing["follow_up_due"] = self.follow_up.sizes[0]
        return picks

    def _counters(self, sampler: bool = True) -> dict:
        """The running counts a round reports the differences of: analyses (``ANALYSES``) and copy
        blocks (``COPY_MEMORY``) asked for and computed, and the screened sampler's (``sampler``)."""
        counts = {"analyses_asked": ANALYSES.asked, "analyses_computed": ANALYSES.computed,
                  "copies_walked": COPY_MEMORY.asked, "copies_computed": COPY_MEMORY.computed}
        if sampler and self.sampler is not None:
            counts.update(self.sampler.stats)
        return counts

    def _round_counters(self) -> dict:
        """``_counters`` and the candidates lowered and dropped as repeated kernels (same_kernel.py)."""
        return dict(self._counters(sampler=False), same_kernel_lowered=self.same_kernels.lowered,
                    same_kernel_skipped=self.same_kernels.repeated)

    def _droplet(self, timing: dict, wanted: bool) -> List:
        """Unmeasured Droplet neighbours of the best measured schedule (when ``wanted``)."""
        start, replays = time.perf_counter(), self.space.replays
        droplet = []
        if self.best is not None and wanted:
            from .droplet import neighbours

            droplet = [s for s in neighbours(self.space, self.best[1], self.params["droplet_neighbours"],
                                             self.rng.randrange(1 << 30)) if self.facts.key(s) not in self.measured]
        timing["droplet_s"] = time.perf_counter() - start
        timing["droplet_replayed"], timing["droplet_valid"] = self.space.replays_since(replays)
        timing["droplet"] = len(droplet)
        return droplet

    def _population(self):
        """(schedules entering the draft, how many of them were carried over from last round)."""
        from .screen import fresh_samples

        population = []
        if self.best is not None:
            workload = self.database.commit_workload(self.context.mod)
            top = self.database.get_top_k(workload, int(self.params["population"] * self.params["init_measured_ratio"]))
            population.extend(self.space.replay_valid([r.trace for r in top], self.rng))
        carried = [s for s in self.carry if self.facts.key(s) not in self.measured]
        carried = carried[:max(0, self.params["population"] - len(population))]
        population.extend(carried)
        missing = self.params["population"] - len(population)
        if carried:
            missing = min(missing, self.params["fresh_samples"])
        # At least MIN_FRESH_SAMPLES fresh ones (where the C++ sampler stops), and with nothing to
        # carry, the cold round's ``cold_samples``.
        wanted = min(missing, MIN_FRESH_SAMPLES if carried else self.settings.cold_samples)
        fresh = fresh_samples(self.sampler, self.draft.warm, wanted, missing, self.rng)
        population.extend(fresh)
        return population, len(carried)

    def _climb(self, draft: List, batch: int):
        """(new unmeasured schedules the analyzer climb visits, the wide fetch-width variants of the
        best members of each climbed geometry, the fragment arrangements of the best member of the
        ``cold_arranged_geometries`` best): climb.cold_climb, with as many members as a geometry's
        capped picks need to alternate between two tied variants (half the cap): the matmul ties
        four variants of two operands' two widest draws, the conv2d layer two (docs/search.md); one
        member when no cap holds a geometry's picks."""
        from .climb import cold_climb

        cap = self._cold_geometry_cap(batch)
        facts = self.facts
        return cold_climb(draft, self.space, lambda s: facts.estimate(s).latency_s, facts.geometry, facts.key,
                          self.measured, self.settings.cold_climb_starts, self.params["cold_climb_steps"],
                          self.params["cold_climb_moves"], self.rng, members=-(-cap // 2) if cap else 1,
                          arranged=self.params["cold_arranged_geometries"])

    def _cold_geometry_cap(self, batch: int) -> Optional[int]:
        if self.settings.cold_geometry_share >= 1.0:
            return None
        return max(1, int(round(batch * self.settings.cold_geometry_share)))

    def _select(self, draft: List, droplet: List, rules: BatchRules, timing: dict, each_family: bool = False) -> List:
        """Best of the draft and of the droplet neighbours by the cost model, plus eps random
        (batch.compose_batch); the draft's unpicked members, best first, are carried over (in a cold
        batch and its follow-up slices, ``each_family``, with each rule family's share: ``_carried``).

        The geometry cap (cold batches) limits the best-ranked picks that share one kernel geometry
        (geometry.py): the analyzer alone ranks a cold batch, and its favourite's variants would
        otherwise fill it. Picks over the cap come back only when the draft has too few geometries.
        Within a geometry, the fetch-width variants and fragment arrangements estimated as ties come in
        turn, and those ptxas allots clearly fewer registers first (``tie_order``).
        """
        self.same_kernels.new_batch()
        self.tie_order.stats = {}
        picks, unpicked = compose_batch(self._rank(droplet), draft, self._rank(draft), rules, self.facts.key,
                                        self.measured, self.rng, self.facts.geometry, self.tie_order,
                                        self.same_kernels.repeats)
        self.carry = self._carried(unpicked) if each_family else unpicked[:self.params["carry_over"]]
        timing.update(self.tie_order.stats)
        return picks

    def _carried(self, ranked: List) -> List:
        """The best-ranked ``carry_over`` of the unpicked draft, ``cold_family_share`` of them from
        each rule family it holds. The cold carry feeds the follow-up slices and the cold batch's
        family floor; cut by rank alone it can lose a family the analyzer ranks low (a 16-thread
        round's draft of 660 held 37 mma members, none among its best 192), and then no floor
        applies. Later rounds rank with a model that has measured both families and cut by rank."""
        keep = self.params["carry_over"]
        floor = int(keep * self.settings.cold_family_share)
        if floor == 0 or len(ranked) <= keep:
            return ranked[:keep]
        return with_family_floor(ranked[:keep], ranked[keep:], _family_lookup(ranked), floor)[0]

    def _family_floor(self, picks: List, batch: int, timing: dict) -> List:
        """A cold batch's picks with ``cold_family_share`` of them from each rule family the draft
        holds (a space of one family is left as it is), a family's best of each kernel geometry
        first (its best-ranked members are often variants of one tiling); the picks given up are
        carried over first."""
        floor = int(batch * self.settings.cold_family_share)
        family = _family_lookup(picks + self.carry)
        if floor > 0 and len({family(s) for s in picks + self.carry}) > 1:
            one_a_geometry = lambda members: capped_per_group(members, 1, self.facts.geometry, len(members))  # noqa: E731
            picks, self.carry = with_family_floor(picks, self.carry, family, floor, one_a_geometry)
        timing["families"] = dict(collections.Counter(str(family(s)) for s in picks))
        return picks

    def _widen_fetches(self, picks: List, excluded: set, kept: frozenset = frozenset()):
        from .fetch_width import widen_narrow_picks

        return widen_narrow_picks(picks, self.space, self.facts.estimate, self.facts.key, excluded, self.rng, kept)

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
            self.measured.add(structural_key(mod))
            self.same_kernels.note_measured(trace, mod)
        self.draft.note_measured(trace)
        if latency < 1e9 and (self.best is None or latency < self.best[0]):
            self.best = (latency, trace)


def _family_lookup(schedules: List) -> Callable:
    """The rule family (space.sketch_family) of each of ``schedules``, read once a schedule."""
    from ..space import sketch_family

    families = {id(s): sketch_family(s.trace) for s in schedules}
    return lambda sch: families[id(sch)]
