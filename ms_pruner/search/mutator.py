"""A mutator for the categorical decisions MetaSchedule's GPU evolution never changes.

MetaSchedule's CUDA mutators (tile size 0.9, unroll 0.08, thread binding 0.02) leave the operand
fetch widths (``meta_schedule.cooperative_fetch``, 1/2/4/8 lanes) where the sampler put them, so
evolution refines tilings whose widths are random draws: three in four samples fetch an operand in
4 bytes or less, which the H100 database measured 7-84% slower on its best tiling
(``docs/search.md``). ``MutateCategorical`` redraws one categorical decision, so the draft can
move a good tiling to the widths the analyzer prefers.
"""

from __future__ import annotations

import random
from typing import Optional

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.mutator import PyMutator


@derived_object
class MutateCategorical(PyMutator):
    """Moves one ``SampleCategorical`` decision of a trace to another of its candidates."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.rng = random.Random(seed)  # draws from its own generator, not from the caller's rand_state

    def _initialize_with_tune_context(self, context) -> None:
        """Nothing to read from the context: the candidates are in the trace."""

    def apply(self, trace, _rand_state) -> Optional[object]:
        choices = [(inst, int(decision)) for inst, decision in trace.decisions.items()
                   if inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1]
        if not choices:
            return None
        inst, index = self.rng.choice(choices)
        new = self.rng.choice([i for i in range(len(inst.attrs[0])) if i != index])
        return trace.with_decision(inst, new, remove_postproc=True)

    def clone(self):
        return MutateCategorical(seed=self.rng.randrange(1 << 30))


def with_categorical_mutator(context, share: float, seed: int):
    """A copy of ``context`` whose space generator also draws MutateCategorical with probability
    ``share`` (the others scaled to the rest), for an inner EvolutionarySearch to evolve with."""
    from tvm.s_tir import meta_schedule as ms

    generator = context.space_generator
    probs = {mutator: float(p) * (1.0 - share) for mutator, p in generator.mutator_probs.items()}
    probs[MutateCategorical(seed=seed)] = share
    space = ms.space_generator.PostOrderApply(sch_rules=list(generator.sch_rules),
                                              postprocs=list(generator.postprocs), mutator_probs=probs)
    return ms.TuneContext(mod=context.mod, target=context.target, space_generator=space,
                          task_name=str(context.task_name), rand_state=seed, num_threads=context.num_threads)
