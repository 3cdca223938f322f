"""The draft's mutators: one for the categorical decisions MetaSchedule's GPU evolution never
changes, and a wrapper that skips the children the draft has already met.

MetaSchedule's CUDA mutators (tile size 0.9, unroll 0.08, thread binding 0.02) leave the operand
fetch widths (``meta_schedule.cooperative_fetch``, 1/2/4/8 lanes) where the sampler put them, so
evolution refines tilings whose widths are random draws: three in four samples fetch an operand in
4 bytes or less, which the H100 database measured 7-84% slower on its best tiling
(``docs/search.md``). ``MutateCategorical`` redraws one categorical decision, so the draft can
move a good tiling to the widths the analyzer prefers.

MetaSchedule's evolution replays every mutated child (the trace on a fresh schedule, then the
postprocessors: ~65 ms for a 4096^3 tensor-core matmul on one core, VerifyGPUCode's lowering 18
of it) and drops duplicates only afterwards, by module hash. With sharp parent selection most
children come from a few parents, and two in five mutated children of a cold H100 matmul draft
repeated a schedule met before (docs/search.md). ``UnseenMutator`` returns no child for those,
so the evolution draws another parent and mutation at once (its retry) instead of paying a replay.
"""

from __future__ import annotations

import random
import threading
from typing import Optional

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import _ffi_api
from tvm.s_tir.meta_schedule.mutator import PyMutator

from .droplet import ordered_decisions


@derived_object
class MutateCategorical(PyMutator):
    """Moves one ``SampleCategorical`` decision of a trace to another of its candidates."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.rng = random.Random(seed)  # draws from its own generator, not from the caller's rand_state

    def _initialize_with_tune_context(self, context) -> None:
        """Nothing to read from the context: the candidates are in the trace."""

    def apply(self, trace, _rand_state) -> Optional[object]:
        choices = [(inst, int(decision)) for inst, decision in ordered_decisions(trace)
                   if inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1]
        if not choices:
            return None
        inst, index = self.rng.choice(choices)
        new = self.rng.choice([i for i in range(len(inst.attrs[0])) if i != index])
        return trace.with_decision(inst, new, remove_postproc=True)

    def clone(self):
        return MutateCategorical(seed=self.rng.randrange(1 << 30))


class SeenDecisions:
    """The decisions of the traces a draft has met, told apart by where they sit in their sketch.

    A trace's key is the count of its instructions before postprocessing and each decision with its
    instruction's position. Traces of one replayed schedule and its mutations share instruction
    objects, so a position is found by walking a schedule's instructions once (``positions``, which
    holds those objects for the draft) and a mutated child's key costs a look-up a decision.
    The decisions of measured schedules stay across drafts (``note_measured``): a child that repeats
    one would be replayed only to be dropped from the draft.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.positions = {}  # instruction -> (its index, instructions before EnterPostproc)
        self.measured = set()
        self.seen = set()
        self.new = 0  # children that were not met before, since the draft started
        self.repeated = 0  # children skipped

    def key(self, trace) -> tuple:
        items = list(trace.decisions.items())
        positions = self.positions
        if any(inst not in positions for inst, _ in items):
            wanted = {inst for inst, _ in items}
            found, length = {}, None
            for index, inst in enumerate(trace.insts):
                if inst.kind.name == "EnterPostproc":
                    length = index
                    break
                if inst in wanted:
                    found[inst] = index
            length = len(trace.insts) if length is None else length
            positions.update((inst, (index, length)) for inst, index in found.items())
        # Decisions as text, as droplet.decision_values has them. One of an instruction after
        # EnterPostproc (none is known) would sit at -1: a key that may collide costs a skipped
        # child, never a wrong schedule.
        located = sorted((positions.get(inst, (-1, 0))[0], str(decision)) for inst, decision in items)
        return (positions.get(items[0][0], (0, len(trace.insts)))[1] if items else len(trace.insts)), tuple(located)

    def start_draft(self) -> None:
        """Forget the last draft's traces, keep the measured ones."""
        with self.lock:
            self.positions = {}
            self.seen = set(self.measured)
            self.new = self.repeated = 0

    def note_measured(self, trace) -> None:
        key = self.key(trace)
        with self.lock:
            self.measured.add(key)
            self.seen.add(key)

    def meet(self, trace) -> None:
        key = self.key(trace)
        with self.lock:
            self.seen.add(key)

    def first_time(self, trace) -> bool:
        """Whether ``trace``'s decisions are new to this draft (and from now on they are not)."""
        key = self.key(trace)
        with self.lock:
            if key in self.seen:
                self.repeated += 1
                return False
            self.seen.add(key)
            self.new += 1
            return True


@derived_object
class UnseenMutator(PyMutator):
    """``inner``'s mutation of a trace, or none when the draft has met the child already (``seen``).

    Called from MetaSchedule's evolution threads; the inner mutator draws from a copy of the
    thread's random state, which the evolution advances with each parent and mutator it draws.
    """

    def __init__(self, inner, seen: SeenDecisions):
        super().__init__()
        self.inner = inner
        self.seen = seen

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def apply(self, trace, rand_state) -> Optional[object]:
        self.seen.meet(trace)
        child = _ffi_api.MutatorApply(self.inner, trace, int(rand_state))  # pylint: disable=no-member
        if child is None or not self.seen.first_time(child):
            return None
        return child

    def clone(self):
        return UnseenMutator(self.inner.clone(), self.seen)


def draft_mutators(context, categorical_share: float, seed: int, seen: Optional[SeenDecisions] = None):
    """A copy of ``context`` for an inner EvolutionarySearch to evolve the draft with: its space
    generator also draws MutateCategorical with probability ``categorical_share`` (the others scaled
    to the rest), and with ``seen`` every mutator skips the children the draft has met."""
    generator = context.space_generator
    probs = {mutator: float(p) * (1.0 - categorical_share) for mutator, p in generator.mutator_probs.items()}
    if categorical_share > 0:
        probs[MutateCategorical(seed=seed)] = categorical_share
    if seen is not None:
        probs = {UnseenMutator(mutator, seen): p for mutator, p in probs.items()}
    space = ms.space_generator.PostOrderApply(sch_rules=list(generator.sch_rules),
                                              postprocs=list(generator.postprocs), mutator_probs=probs)
    return ms.TuneContext(mod=context.mod, target=context.target, space_generator=space,
                          task_name=str(context.task_name), rand_state=seed, num_threads=context.num_threads)
