"""What a split cold batch leaves to its follow-up rounds: the rest of the batch, in slices.

On a GPU the cold round measures part of its batch; the rest is measured around the best of it
(pruner.py), in ``follow_up_slices`` rounds rather than one. A tuning run's time to a latency is
counted at round ends: the first slice comes back sooner (the same search, model update and
build start, half the candidates to build and run), and the next slice is chosen with its results
in, Droplet neighbours of the best kernel so far (docs/search.md, the first-round policy).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Hashable, Iterable, List, Optional


@dataclasses.dataclass
class FollowUp:
    """The follow-up rounds still due in one batch.

    ``sizes``: the trials of each, next first. ``geometries``: how many of this batch's draft picks
    (not Droplet neighbours) each kernel geometry holds so far; the cold geometry cap spans the
    whole batch. ``resumed``: a new process picks the next slice, with no cold draft carried over
    (a warm draft stands in; its counts are of every record measured)."""

    sizes: List[int]
    geometries: collections.Counter
    resumed: bool = False

    @property
    def trials(self) -> int:
        return sum(self.sizes)

    def after(self, picked_geometries: Iterable[Hashable]) -> Optional["FollowUp"]:
        """What is due once the next slice is picked (``picked_geometries``, one per draft pick);
        None when it was the last."""
        if len(self.sizes) <= 1:
            return None
        return FollowUp(self.sizes[1:], self.geometries + collections.Counter(picked_geometries))


def slice_sizes(rest: int, slices: int) -> List[int]:
    """``rest`` trials in ``slices`` rounds as even as can be, larger first (at most ``rest`` rounds)."""
    slices = max(1, min(int(slices), rest))
    return [rest // slices + (1 if i < rest % slices else 0) for i in range(slices)]


def resumed_follow_up(per_iter: int, cold_trials: int, tried: int, slices: int,
                      geometries: Iterable[Hashable]) -> Optional[FollowUp]:
    """The follow-up a call still owes when the work dir holds ``tried`` records of the first batch,
    the cold part of which was ``cold_trials`` (an earlier call cut by a time limit between two of
    the batch's rounds); None when the first batch was not split or is complete. The slices left
    are the planned ones not yet measured, the first shortened by any trials past a slice's end."""
    if not cold_trials <= tried < per_iter:
        return None
    sizes, done = slice_sizes(per_iter - cold_trials, slices), tried - cold_trials
    while done >= sizes[0]:
        done -= sizes.pop(0)
    sizes[0] -= done
    return FollowUp(sizes, collections.Counter(geometries), resumed=True)
