"""What one search round asks of its candidate schedules again and again, each answer found once.

A round's draft filter, climb, batch rules and selection each ask for a schedule's structural hash
(is it measured? which candidates are the same program?), its analyzer estimate and its kernel
geometry; the answers do not change within the round, and the hash alone costs a fraction of a
millisecond on a tensor-core program.
"""

from __future__ import annotations

from typing import Dict, Tuple

from ..analysis import kernel_geometry
from ..database.records import structural_key
from .droplet import tile_decisions


class CandidateFacts:
    """Per schedule of a round: ``key`` (structural hash), ``estimate`` (the analyzer's, shared with
    the other models of the round through the analyzer's memory) and ``geometry``."""

    def __init__(self, analyzer):
        self.analyzer = analyzer
        self._keys: Dict[int, Tuple[object, int]] = {}

    def new_round(self) -> None:
        """Forget the schedule objects of the last round (their ids may be reused)."""
        self._keys = {}

    def key(self, sch) -> int:
        """``structural_key(sch.mod)``, hashed once per schedule object a round."""
        entry = self._keys.get(id(sch))
        if entry is None or entry[0] is not sch:
            entry = (sch, structural_key(sch.mod))
            self._keys[id(sch)] = entry
        return entry[1]

    def estimate(self, sch):
        return self.analyzer.estimate(sch.mod, self.key(sch))

    def geometry(self, sch):
        """The analyzer's view of a schedule's tiling (``analysis.kernel_geometry``); the tile
        sizes on a CPU."""
        return kernel_geometry(self.estimate(sch).features) or tile_decisions(sch.trace)
