"""Search: the design space in Python, the analyzer as fitness, and PrunerSearch with its configs."""

from .config import FirstRoundConfig, PrunerConfig
from .droplet import decision_kinds, decision_values, neighbour_decisions, neighbours, steps_apart, tile_decisions
from .pruner import PrunerSearch
from ..cost_model.analyzer_model import PSACostModel
from .settings import changed_settings, parse_settings, pruner_configs
from .space import DesignSpace
from .warm_start import warm_best_source, warm_start_line

__all__ = ["DesignSpace", "FirstRoundConfig", "PSACostModel", "PrunerConfig", "PrunerSearch", "changed_settings",
           "decision_kinds", "decision_values", "neighbour_decisions", "neighbours", "parse_settings", "pruner_configs",
           "steps_apart", "tile_decisions", "warm_best_source", "warm_start_line"]
