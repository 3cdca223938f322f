"""The one exception type that the CLI turns into a single-line message, and the checks of values
a user gives that raise it."""


# The largest seed numpy's and MetaSchedule's random generators accept.
MAX_SEED = 2**32 - 1


class UserError(Exception):
    """Bad input or an unusable environment, reported to the user as one line (no traceback)."""


def last_line(error, fallback: str = "error") -> str:
    """An error's last non-empty line: where TVM's FFI puts the message, under its traceback."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else fallback


def raised_by_user_code(error) -> str:
    """An error raised by a user's own file or function, as one line: its type and its message's
    first line (TVMScript's parser puts the source excerpt below)."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def require_positive(option: str, value) -> None:
    """A count or limit the user gave (``--trials``, ``--per-iter``, ...) that must be above zero."""
    if value <= 0:
        raise UserError(f"{option} must be positive, got {value:g}")


def require_library_name(option: str, path: str) -> None:
    """A library to write: ``.so`` (``tvm.runtime.load_module`` loads it) or ``.tar`` (objects to link)."""
    if not path.endswith((".so", ".tar")):
        raise UserError(f"{option} {path}: name a .so (loaded with tvm.runtime.load_module) or a .tar")


def require_seed(seed) -> None:
    """A seed the random generators accept, or None (a random one)."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed must be from 0 to {MAX_SEED}, got {seed}")
