"""The one exception type that the CLI turns into a single-line message."""


class UserError(Exception):
    """Bad input or an unusable environment, reported to the user as one line (no traceback)."""
