"""A MetaSchedule design space in Python: sketches, random sampling and trace replay.

Sampling drops a sketch's decisions and replays it on a fresh schedule, then applies the
space's postprocessors (tensorize, cooperative fetch, VerifyGPUCode ...), exactly what
EvolutionarySearch does in C++; a candidate that a postprocessor rejects is not returned.
"""

from __future__ import annotations

import collections
import random
from typing import Callable, List, Optional

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Schedule, Trace

from ..intrinsics import register_tensor_intrinsics
from ..space.families import sketch_family
from ..threads import map_on_threads
from .candidates import structural_key


class PerSchedule:
    """A decision provider made for the schedule a trace replays on (``make(sch)``): one that reads
    the new schedule's loops, as transfer.adapting_provider does."""

    def __init__(self, make: Callable):
        self.make = make


class DesignSpace:
    """The sketches, postprocessors and mutators MetaSchedule would use for ``mod`` on ``target``."""

    def __init__(self, mod, target, space="post-order-apply", context=None):
        register_tensor_intrinsics()
        if context is None:
            context = ms.TuneContext(mod=mod, target=target, space_generator=space, num_threads=1)
        self.context = context
        self.mod = context.mod
        self.target = context.target
        generator = context.space_generator
        self.sketches = [s.trace.simplified(remove_postproc=True) for s in generator.generate_design_space(self.mod)]
        self.sketch_families = [sketch_family(s) for s in self.sketches]
        by_family = collections.defaultdict(list)
        for index, family in enumerate(self.sketch_families):
            by_family[family].append(index)
        self._family_members = [by_family[f] for f in sorted(by_family, key=str)]  # pick_sketch's draw
        self.postprocs = list(generator.postprocs)
        self.mutator_probs = {m: float(p) for m, p in generator.mutator_probs.items()}
        self.verify_at = next((i for i, p in enumerate(self.postprocs) if type(p).__name__ == "VerifyGPUCode"),
                              len(self.postprocs))  # where replay_checked reads a schedule
        self.replays = (0, 0, 0)  # (traces replay_each replayed, those that came back valid, its calls), over its life

    def pick_sketch(self, rng: random.Random) -> int:
        """A random sketch's index, each rule family drawn as often as the others: a family's share
        of the draws does not shrink as another family gains sketches (the mma family has six: two
        instructions at three depths, WMMA two). With one family, MetaSchedule's uniform draw."""
        if len(self._family_members) < 2:
            return rng.randrange(len(self.sketches))
        members = self._family_members[rng.randrange(len(self._family_members))]
        return members[rng.randrange(len(members))]

    def replay(self, trace, seed: int, keep_decisions: bool = True,
               decision_provider: Optional[Callable] = None):
        """Apply ``trace`` to a fresh schedule and run the postprocessors; None if rejected.
        ``decision_provider`` is TVM's (``trace.apply_to_schedule``), or a ``PerSchedule`` of one."""
        return self.replay_verdict(trace, seed, keep_decisions, decision_provider)[0]

    def replay_verdict(self, trace, seed: int, keep_decisions: bool = True,
                       decision_provider: Optional[Callable] = None):
        """(``replay`` of ``trace``, None) or (None, why): "replay" where the trace does not apply,
        else the type name of the postprocessor that rejected it."""
        sch = self._applied(trace, seed, keep_decisions, decision_provider)
        if sch is None:
            return None, "replay"
        rejected = _first_rejection(sch, self.postprocs)
        return (sch, None) if rejected is None else (None, type(self.postprocs[rejected]).__name__)

    def replay_checked(self, trace, seed: int, analyzer):
        """(``replay`` of ``trace`` or None, what VerifyGPUCode checks as the analyzer reads the
        schedule before it): {"threads": threads a block, ("operand" | "staging", buffer): shared
        bytes a block}, the largest over kernels, so a rejected draw has them too (empty when the
        trace does not apply or the analyzer finds no kernel)."""
        sch = self._applied(trace, seed, True, None)
        if sch is None:
            return None, {}
        verify = self.verify_at
        if not _postprocessed(sch, self.postprocs[:verify]):
            return None, {}
        measures = {}
        for kernel in analyzer.estimate(sch.mod).features:
            found = [("threads", kernel.threads_per_block)]
            found += [(("operand", name), v) for name, v in kernel.operand_tiles.items()]
            found += [(("staging", name), v) for name, v in kernel.staging_tiles.items()]
            for key, value in found:
                measures[key] = max(measures.get(key, 0.0), float(value))
        return (sch if _postprocessed(sch, self.postprocs[verify:]) else None), measures

    def _applied(self, trace, seed: int, keep_decisions: bool, decision_provider):
        """A fresh schedule with ``trace`` applied, entered into its postprocessing; None if it fails."""
        trace = trace.simplified(remove_postproc=True)
        if not keep_decisions:
            trace = Trace(trace.insts, {})
        sch = Schedule(self.mod, seed=seed, error_render_level="none")
        if isinstance(decision_provider, PerSchedule):
            decision_provider = decision_provider.make(sch)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=decision_provider)
        except Exception:  # pylint: disable=broad-except
            return None
        sch.enter_postproc()
        return sch

    def replay_many(self, traces: List, seeds: List[int]) -> List:
        """``replay`` of each trace with its seed, in order, on the tuning context's threads (a
        replay is TVM C++, the primitives and postprocessors MetaSchedule's own evolution applies
        from many threads at once: ms_pruner/threads.py)."""
        return self.on_threads(self.replay, traces, seeds)

    def on_threads(self, replay: Callable, traces: List, seeds: List[int]) -> List:
        """``replay(trace, seed)`` of each trace, in order, on the tuning context's threads."""
        return map_on_threads(replay, traces, seeds, threads=self.context.num_threads)

    def replay_valid(self, traces: List, rng: random.Random) -> List:
        """The schedules of ``traces`` that replay and pass the postprocessors, in order."""
        return [sch for sch in self.replay_each(traces, rng) if sch is not None]

    def replay_each(self, traces: List, rng: random.Random) -> List:
        """Each of ``traces`` replayed, None where it fails or a postprocessor rejects it, each with a
        seed drawn from ``rng`` (one per trace, drawn before any replay runs, so the draws do not
        depend on which traces fail)."""
        seeds = [rng.randrange(1, 1 << 30) for _ in traces]
        schedules = self.replay_many(traces, seeds)
        replayed, valid, batches = self.replays
        self.replays = (replayed + len(traces), valid + sum(s is not None for s in schedules), batches + 1)
        return schedules

    def replays_since(self, before: tuple) -> tuple:
        """(replayed, valid, batches) of ``replay_each`` since ``replays`` was ``before``."""
        return tuple(now - then for now, then in zip(self.replays, before))

    def sample(self, count: int, seed: int = 0, max_attempts: Optional[int] = None,
               exclude: Optional[set] = None, verdicts: Optional[dict] = None) -> List:
        """Up to ``count`` distinct random candidates (post-processed Schedules). ``verdicts``, when
        given, receives the draws made ("drawn"), the valid repeats ("duplicates") and the rejections
        by what made them ("rejected": ``replay_verdict``'s reasons)."""
        rng = random.Random(seed)
        seen = set(exclude or ())
        found = []
        tally = verdicts if verdicts is not None else {}
        tally.update(drawn=0, duplicates=0, rejected=collections.Counter())
        attempts = max_attempts if max_attempts is not None else 20 * count + 20
        for _ in range(attempts):
            if len(found) >= count:
                break
            tally["drawn"] += 1
            sketch = self.sketches[self.pick_sketch(rng)]
            sch, why = self.replay_verdict(sketch, seed=rng.randrange(1, 2**30), keep_decisions=False)
            if sch is None:
                tally["rejected"][why] += 1
                continue
            key = structural_key(sch.mod)
            if key in seen:
                tally["duplicates"] += 1
                continue
            seen.add(key)
            found.append(sch)
        return found


def _postprocessed(sch, postprocs) -> bool:
    """Run ``postprocs`` on ``sch`` in order; False at the first that rejects it or fails."""
    return _first_rejection(sch, postprocs) is None


def _first_rejection(sch, postprocs) -> Optional[int]:
    """Run ``postprocs`` on ``sch`` in order: the index of the first that rejects it or fails, or None."""
    for index, postproc in enumerate(postprocs):
        try:
            if not postproc.apply(sch):
                return index
        except Exception:  # pylint: disable=broad-except
            return index
    return None
