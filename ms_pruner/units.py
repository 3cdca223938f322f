"""How the reports write a latency: microseconds, one decimal, as MetaSchedule's task table does."""

from __future__ import annotations

from typing import Optional


def microseconds(seconds: Optional[float], missing: str = "-") -> str:
    """``seconds`` in microseconds (``12.3``), or ``missing`` where there is no latency (None, 0)."""
    return f"{seconds * 1e6:.1f}" if seconds else missing
