"""The tensor-core first-round policy: what Pruner's cold round and its follow-up add (policy.py)."""

from .policy import FirstRoundPolicy

__all__ = ["FirstRoundPolicy"]
