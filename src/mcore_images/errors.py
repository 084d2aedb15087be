"""One error type for every bad input: one line that names the problem and the fix."""


class InputError(Exception):
    """A user input that cannot be built or run; str() is the one-line message with its fix."""

    exit_code = 2


class StepFailed(InputError):
    """A step that started and failed (a download, debootstrap): one line naming the cause, exit 1."""

    exit_code = 1


SHOWN_MAX = 60
"""The most characters of a user's value an error message repeats."""


def shown(value: object, limit: int = SHOWN_MAX) -> str:
    """A value as an error message may print it: control characters escaped (a newline, NUL or terminal escape
    from a file or the command line never reaches the terminal raw), and a long one cut, saying its length."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(value))
    return text if len(text) <= limit else f"{text[:limit]}… ({len(str(value))} characters)"
