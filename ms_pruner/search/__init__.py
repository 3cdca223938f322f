"""Search: the design space in Python (sampling, replay)."""

from .space import DesignSpace

__all__ = ["DesignSpace"]
