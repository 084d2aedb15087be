"""Standard output kept for a program's JSON report: libraries print banners and parameter counts to it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """File descriptor 1 points at stderr inside (so does what C extensions and child processes print), and back
    after, whatever happens inside."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
