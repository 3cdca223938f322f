"""PrunerSearch: draft with the static analyzer, verify with the learned model, exploit the best.

A round: the population (best measured, last round's unmeasured draft, fresh samples: screen.py),
the draft (draft.py: evolution with the analyzer as fitness), verify (verify.py: the cost model
ranks the draft and Droplet's neighbours of the best measured, droplet.py) and the update with the
results. The first-round policy (first_round/) acts on a cold round and its follow-up slices.
"""

from __future__ import annotations

import random
from typing import List, Optional, Sequence, Tuple

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..analysis import ANALYSES, StaticAnalyzer
from ..cost_model import PaCM
from ..database.records import mean_latency, measure_candidate, measured_batch, records_for, replayed_top_records
from ..intrinsics import register_tensor_intrinsics
from .candidates import CandidateFacts, structural_key
from .config import FirstRoundConfig, PrunerConfig
from .draft import AnalyzerDraft
from .droplet import unmeasured_neighbours
from .first_round import FirstRoundPolicy
from .same_kernel import SameKernels
from .screen import ScreenedSampler
from .settings import logged_settings
from .space import DesignSpace
from .stats import RoundStats, counters
from .verify import BatchRules, compose_batch, rank
from .warm_start import WarmStart


@derived_object
class PrunerSearch(PySearchStrategy):
    """Draft-then-verify search strategy for ``ms.tune_tir`` / ``tune_tasks`` / ``tune_relax``.

    ``config`` sets Pruner's round, ``first_round`` the tensor-core first-round policy (None: off).
    ``timings`` (a list, shared with clones) receives the RoundStats of each batch searched, in order.
    ``pretrained`` (a file from ``ms-pruner train``) makes the search verify with its own MoA PaCM,
    updated after every measured batch, whatever cost model the tuning call carries. ``warm_start``
    (work dirs) leads the first round with adapted records of other workloads (warm_start.py).
    """

    def __init__(self, config: Optional[PrunerConfig] = None,
                 first_round: Optional[FirstRoundConfig] = FirstRoundConfig(), seed: int = 0,
                 pretrained: Optional[str] = None, momentum: float = 0.9, timings: Optional[list] = None,
                 warm_start: Sequence[str] = ()):
        super().__init__()
        register_tensor_intrinsics()  # before ms.tune_tir's TuneContext imports them, ten times slower
        self.config = config if config is not None else PrunerConfig()
        self.first_round_config = first_round
        self.seed, self.pretrained, self.momentum, self.warm_start = seed, pretrained, momentum, tuple(warm_start)
        self.timings = timings if timings is not None else []
        self.rng = random.Random(seed)
        self.context = self.space = self.analyzer = self.facts = None
        # Set by the tune context: the analyzer draft (draft.py), ``config`` resolved for the target,
        # the FirstRoundPolicy, the screened sampler of fresh samples (screen.py, on a GPU).
        self.draft = self.settings = self.first_round = self.sampler = self.warm = None
        self.follow_up, self.stats = None, {}  # the cold round's rest (first_round/follow_up.py); the last RoundStats

    # -- MetaSchedule plumbing ------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.space = DesignSpace(context.mod, context.target, context=context)
        self.analyzer = StaticAnalyzer.for_target(context.target, memory=ANALYSES)
        self.facts = CandidateFacts(self.analyzer)
        kind = "gpu" if self.analyzer.is_gpu else "cpu"
        self.settings = settings = self.config.resolved(kind)
        if self.first_round_config is not None:
            self.first_round = FirstRoundPolicy(self.first_round_config.resolved(kind), self.space, self.facts,
                                                context.target, int(context.num_threads), self.rng)
        self.draft = AnalyzerDraft(context, self.analyzer, settings, self.seed)
        if settings.screen_samples and self.analyzer.is_gpu:
            self.sampler = ScreenedSampler.for_target(self.space, self.analyzer, settings.sample_saturation)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.max_trials, self.per_iter = int(max_trials), int(num_trials_per_iter)
        self.database = database if database is not None else ms.database.MemoryDatabase()
        self.own_model = PaCM(pretrained=self.pretrained, momentum=self.momentum, seed=self.seed) \
            if self.pretrained else None
        self.cost_model = self.own_model if self.own_model is not None else cost_model
        self.trials, self.measured = 0, set()
        self.same_kernels = SameKernels(self.context.target)  # unroll depths that change nothing (same_kernel.py)
        self.best, self.carry, self.follow_up = None, [], None  # (latency, trace); unmeasured draft, best first
        self.draft.pre_tuning(max_trials, num_trials_per_iter, design_spaces, self.database)
        schedules, latencies = self._replay_measured()
        # A resumed run goes on counting rounds where the earlier calls left off, so Droplet starts
        # when it would have in one call; its failed records count too (get_top_k leaves them out).
        tried = len(records_for(self.database, self.context.mod, self.context.target))
        self.round = -(-max(tried, len(self.measured)) // max(1, self.per_iter))
        if schedules and self.first_round is not None:  # an earlier call ended inside the first batch
            self.follow_up = self.first_round.resumed_follow_up(self.per_iter, tried, schedules)
        if self.warm_start and not self.measured:  # a first round: other workloads' records lead it
            self.warm = WarmStart(self.warm_start)
            self.warm.prepare(self.space, self.facts, self.seed)
        if self.own_model is not None and schedules:  # a resumed run: the MoA model learns what was measured
            self.own_model.update(self.context, *measured_batch(schedules, latencies))

    def _replay_measured(self):
        """(schedules, latencies) of the records already in the database, each noted as measured."""
        pairs = list(zip(*replayed_top_records(self.database, self.context.mod, self.space.replay_many)))
        for record, sch in pairs:
            self._note_measured(record.trace, mean_latency(record), sch.mod if sch is not None else None)
        return [s for _, s in pairs if s is not None], [mean_latency(r) for r, s in pairs if s is not None]

    def post_tuning(self) -> None:
        self.draft.post_tuning()

    def clone(self):
        return PrunerSearch(self.config, self.first_round_config, self.seed, self.pretrained, self.momentum,
                            self.timings, self.warm_start)

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        for candidate, result in zip(measure_candidates, results):
            latency = mean_latency(result) if result.error_msg is None else float("inf")
            self._note_measured(candidate.sch.trace, latency, candidate.sch.mod)
        if self.own_model is not None:
            self.own_model.update(self.context, measure_candidates, results)
            self.stats["verifier_records"] = len(self.own_model.core.samples)
        self.draft.notify_runner_results(measure_candidates, results)

    def _note_measured(self, trace, latency: float, mod) -> None:
        if mod is not None:
            self.measured.add(structural_key(mod))
            self.same_kernels.note_measured(trace, mod)
        self.draft.note_measured(trace)
        if latency < 1e9 and (self.best is None or latency < self.best[0]):
            self.best = (latency, trace)

    # -- the round ------------------------------------------------------------------------
    def generate_measure_candidates(self):
        if self.trials >= self.max_trials:
            return None
        left = self.max_trials - self.trials
        follow_up, self.follow_up = self.follow_up, None
        header = {"round": self.round, "task": str(self.context.task_name),
                  "verifier": f"own {self.own_model.description}" if self.own_model is not None else "tuning cost model",
                  **logged_settings(self.config, self.first_round_config)}
        stats, picks = RoundStats(header), []
        before = counters(same_kernels=self.same_kernels)
        if follow_up is not None and self.best is not None:
            picks = self._follow_up_round(follow_up, min(follow_up.sizes[0], left), stats)
        if not picks:  # no follow-up due, or nothing left to follow up with: search anew
            stats = RoundStats(header)
            # A cold half that measured nothing valid leaves no best to follow up: the rest of its
            # batch is searched cold at once, not halved again.
            batch = min(follow_up.trials if follow_up is not None else self.per_iter, left)
            picks = self._searched_round(batch, stats, split=follow_up is None)
        stats["picked"] = len(picks)
        stats.add_differences(before, counters(same_kernels=self.same_kernels))
        self.round += 1
        if not picks:
            return None
        self.timings.append(stats)  # one a batch searched: the round clock pairs them with rounds in order
        self.stats = stats
        self.measured.update(self.facts.key(sch) for sch in picks)
        return [measure_candidate(sch) for sch in picks]

    def _searched_round(self, batch: int, stats: RoundStats, split: bool = True) -> List:
        """Sample, draft, verify: an ordinary round's picks, or a cold one's (of which the
        first-round policy measures ``cold_batch_share`` when ``split``, leaving it the rest)."""
        self.facts.new_round()
        policy = self.first_round if self.best is None else None  # the cold round's
        full_batch = batch
        if policy is not None and split:
            batch = policy.cold_trials(batch)
        draft, population = self._draft(self.best is None, stats)
        if policy is not None:
            draft = policy.expand_draft(draft, batch, self.measured, stats, population)
        droplet = self._droplet(stats, self.round >= self.settings.droplet_after)
        with stats.stage("verify"):
            rules = BatchRules(batch, self.settings.droplet_share, self.settings.eps_greedy,
                               policy.batch_order(batch, batch) if policy is not None else None)
            picks = self._select(draft, droplet, rules, stats, policy)
            if policy is not None:
                picks, self.carry = policy.family_floor(picks, self.carry, batch, stats)
        if policy is not None:
            picks = policy.widen(picks, self.measured, stats)
        if self.warm is not None and self.best is None:  # measured as adapted: after the widening
            picks, self.warm = self.warm.first_picks(picks, batch, self.facts.key, self.measured, stats), None
        if policy is not None and picks and batch < full_batch:
            self.follow_up = policy.follow_up(full_batch, picks, stats)
        return picks

    def _follow_up_round(self, pending, batch: int, stats: RoundStats) -> List:
        """A slice of the rest of a cold batch: the cold draft's unpicked members ranked by the model
        that learned the batch so far (under the cold round's rules), and the best measured's
        neighbours (as built, under no cap); a resumed call's warm draft stands in for the cold one."""
        stats["follow_up"] = True
        if pending.resumed:
            self.facts.new_round()
            draft, _ = self._draft(False, stats)
        else:
            draft = [s for s in self.carry if self.facts.key(s) not in self.measured]
            stats.update(carried=len(draft), population=0, sample_s=0.0, draft_s=0.0, draft=len(draft), generations=0)
        droplet = self._droplet(stats, True)
        with stats.stage("verify"):
            rules = BatchRules(batch, self.first_round.config.follow_up_droplet_share, self.settings.eps_greedy,
                               self.first_round.batch_order(batch, self.per_iter, pending.geometries))
            picks = self._select(draft, droplet, rules, stats, self.first_round)
        neighbours = frozenset(self.facts.key(s) for s in droplet)
        picks = self.first_round.widen(picks, self.measured | neighbours, stats, kept=neighbours)
        self.follow_up = pending.after([self.facts.geometry(s) for s in picks
                                        if self.facts.key(s) not in neighbours]) if picks else None
        if self.follow_up is not None:
            stats["follow_up_due"] = self.follow_up.sizes[0]
        return picks

    def _draft(self, cold: bool, stats: RoundStats) -> Tuple[List, List]:
        """(the draft: the population evolved with the analyzer, a round's unmeasured candidates; the population)."""
        before = counters(self.sampler)
        with stats.stage("sample"):
            best = []
            if self.best is not None:
                top = self.database.get_top_k(self.database.commit_workload(self.context.mod),
                                              int(self.settings.population * self.settings.init_measured_ratio))
                best = self.space.replay_valid([r.trace for r in top], self.rng)
            carry = [s for s in self.carry if self.facts.key(s) not in self.measured]
            population, stats["carried"] = self.draft.population(best, carry, self.sampler, self.rng)
        if self.sampler is not None:  # the sampler's replays, and the analyses and copy blocks they read
            stats.add_differences(before, counters(self.sampler), prefix="sample_")
        stats["population"] = len(population)
        draft = self.draft.evolve(population, cold, lambda s: self.facts.key(s) not in self.measured, stats)
        stats["draft"] = len(draft)
        return draft, population

    def _droplet(self, stats: RoundStats, wanted: bool) -> List:
        """Unmeasured Droplet neighbours of the best measured schedule (when ``wanted``)."""
        best = self.best[1] if self.best is not None and wanted else None
        return unmeasured_neighbours(self.space, best, self.settings.droplet_neighbours, self.rng,
                                     lambda s: self.facts.key(s) not in self.measured, stats)

    def _select(self, draft: List, droplet: List, rules: BatchRules, stats: RoundStats,
                policy: Optional[FirstRoundPolicy]) -> List:
        """The batch (verify.compose_batch) of the draft and the neighbours ranked by the cost
        model; the draft's unpicked members, best first, are carried over (by the policy in a cold
        batch and its follow-up slices, each rule family keeping its share)."""
        self.same_kernels.new_batch()
        rank_ = lambda schedules: rank(self.cost_model, self.context, schedules)  # noqa: E731
        picks, unpicked = compose_batch(rank_(droplet), draft, rank_(draft), rules, self.facts.key, self.measured,
                                        self.rng, self.same_kernels.repeats)
        keep = self.settings.carry_over
        self.carry = policy.carried(unpicked, keep) if policy is not None else unpicked[:keep]
        if policy is not None:
            stats.update(policy.tie_order.round_stats(picks))
        return picks
