"""Search: the design space in Python, the analyzer as fitness, and PrunerSearch."""

from .droplet import descend, neighbour_decisions, neighbours, tile_decisions
from .pruner import DEFAULTS, PrunerSearch
from .psa_model import PSACostModel
from .space import DesignSpace

__all__ = ["DEFAULTS", "DesignSpace", "PSACostModel", "PrunerSearch", "descend", "neighbour_decisions", "neighbours",
           "tile_decisions"]
