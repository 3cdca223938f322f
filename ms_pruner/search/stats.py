"""RoundStats: what one PrunerSearch round did, as the round log's ``strategy`` entry records it.

The log's fields are documented once, in docs/architecture.md ("The round log"): a stage's seconds are
``<stage>_s`` (``STAGES``, in the order a round runs them), the rest are counts.
"""

from __future__ import annotations

import contextlib
import time

from ..analysis import ANALYSES
from ..analysis.copies import COPY_MEMORY

# The timed stages of a round, in order: sample the population, draft with the analyzer, climb from
# the draft's best geometries (a cold round), verify (rank and compose the batch), Droplet's
# neighbours, widen the picks' narrow fetches (first-round policy).
STAGES = ("sample", "draft", "climb", "verify", "droplet", "widen")


class RoundStats(dict):
    """One round's log entry: ``with stats.stage("draft"):`` times a stage into ``draft_s``; counts
    are set as items. A dict, so the round log and ``compare`` read it as JSON."""

    @contextlib.contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield self
        finally:
            self[f"{name}_s"] = time.perf_counter() - start

    def add_differences(self, before: dict, after: dict, prefix: str = "") -> None:
        """Each counter's growth from ``before`` to ``after`` (see ``counters``), named ``prefix`` + name."""
        self.update({f"{prefix}{name}": value - before[name] for name, value in after.items()})


def counters(sampler=None, same_kernels=None) -> dict:
    """The running counts a round reports the growth of: analyses (``ANALYSES``) and copy blocks
    (``COPY_MEMORY``) asked for and computed, the screened ``sampler``'s, and the candidates
    ``same_kernels`` lowered and dropped as repeated kernels (same_kernel.py)."""
    counts = {"analyses_asked": ANALYSES.asked, "analyses_computed": ANALYSES.computed,
              "copies_walked": COPY_MEMORY.asked, "copies_computed": COPY_MEMORY.computed}
    if sampler is not None:
        counts.update(sampler.stats)
    if same_kernels is not None:
        counts.update(same_kernel_lowered=same_kernels.lowered, same_kernel_skipped=same_kernels.repeated)
    return counts
