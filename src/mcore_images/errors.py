"""One error type for every bad input: one line that names the problem and the fix."""


class InputError(Exception):
    """A user input that cannot be built or run; str() is the one-line message with its fix."""

    exit_code = 2
