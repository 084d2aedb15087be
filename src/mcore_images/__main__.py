"""`python -m mcore_images` and the `mcore-images` command (pyproject's entry point): Ctrl-C is one line and exit
130, from the first moment the tool's own code runs.

The command table (cli.py) imports the module of the command it runs, which can take a good part of a second: a
KeyboardInterrupt raised inside that import would end in a traceback. So SIGINT is handled here first, before any
import, and ends the process at once with the line (os._exit: nothing to unwind yet); once the command's module is
imported (cli.main calls ``ready``), Ctrl-C is a KeyboardInterrupt again (what a command was writing is cleaned up
on its way out) and ends with the same line. Standard library only, so that nothing is imported before the handler
is in place.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (SIGINT), as a shell reports one: 128 + 2."""
INTERRUPTED_LINE = "interrupted (Ctrl-C): stopped; what it was writing is left unfinished, not replaced"


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    # Ends the process here rather than raising: an exception raised from a signal handler surfaces wherever the
    # interpreter is at that moment and can be swallowed there (once, on a loaded machine, the line was printed and
    # `lock --check` ran on and exited 0). Nothing was started or written yet, so there is nothing to unwind.
    print(f"\n{INTERRUPTED_LINE}", file=sys.stderr, flush=True)
    os._exit(INTERRUPTED)


def main() -> int:
    own = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not where the caller ignores SIGINT
    if own:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        from mcore_images import cli  # the command table; it imports the module of the command it runs

        def ready() -> None:
            if own:
                signal.signal(signal.SIGINT, signal.default_int_handler)

        code = cli.main(ready=ready)
        if own:  # the command has finished: a Ctrl-C from here on (the interpreter's shutdown) leaves its exit code
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return code
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; programs it started got the signal too
        print(f"\n{INTERRUPTED_LINE}", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
