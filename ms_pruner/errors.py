"""The one exception type that the CLI turns into a single-line message."""


class UserError(Exception):
    """Bad input or an unusable environment, reported to the user as one line (no traceback)."""


def require_positive(option: str, value) -> None:
    """A count or limit the user gave (``--trials``, ``--per-iter``, ...) that must be above zero."""
    if value <= 0:
        raise UserError(f"{option} must be positive, got {value:g}")
