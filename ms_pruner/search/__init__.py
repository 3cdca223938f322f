"""Search: the design space in Python, the analyzer as fitness, and PrunerSearch."""

from .droplet import decision_kinds, decision_values, neighbour_decisions, neighbours, steps_apart, tile_decisions
from .pruner import DEFAULTS, PrunerSearch
from .psa_model import PSACostModel
from .space import DesignSpace

__all__ = ["DEFAULTS", "DesignSpace", "PSACostModel", "PrunerSearch", "decision_kinds", "decision_values",
           "neighbour_decisions", "neighbours", "steps_apart", "tile_decisions"]
