"""pytest's progress as certify's steps: the image tests and a framework's own tests take minutes each, and certify
printed their output only when they ended.

pytest runs verbose with the count style (``-v -o console_output_style=count``): a line per test, ending
``PASSED [ 12/98]``. Those lines become one step per test file (``image tests 12/98: tests/image/base/test_os.py: 4
passed, 1 skipped``) and one at once for a test that fails; pytest's other lines (the header, the failures, the
durations, the summary) are printed as they come. The summary, pytest's last line, is what the certificate keeps.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from mcore_images.progress import Progress

VERBOSE = ("-v", "-o", "console_output_style=count")
"""pytest's options for a line per test that says how far the run is."""
RESULT = re.compile(r"^(?P<test>\S+::\S.*?) (?P<outcome>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b.*?"
                    r"\[\s*(?P<done>\d+)/(?P<total>\d+)\]\s*$")
BAD = frozenset({"FAILED", "ERROR"})


@dataclass
class PytestSteps:
    """Follows one pytest run's verbose output: a step per test file and per failure, pytest's other lines echoed."""

    name: str
    """What the run is, as the steps say it ("image tests", "verl's own tests")."""
    progress: Progress
    echo: TextIO | None = None
    """Where pytest's own lines go (default: stdout)."""
    file: str | None = None
    outcomes: Counter = field(default_factory=Counter)
    done: int = 0
    total: int = 0
    last: str = ""
    """pytest's last line that was not a test's: its summary, once it ends."""
    test: str = ""
    """The last test that ended."""

    def line(self, text: str) -> None:
        found = RESULT.match(text)
        if not found:
            print(text, file=self.echo or sys.stdout, flush=True)
            if text.strip():
                self.last = text.strip().strip("=").strip()
            return
        test, outcome = found["test"], found["outcome"]
        self.test = test
        file = test.split("::", 1)[0]
        if file != self.file:
            self.finish()
            self.file = file
        self.done, self.total = int(found["done"]), int(found["total"])
        self.outcomes[outcome.lower()] += 1
        if outcome in BAD:
            self.progress.say(f"{self.where()}: {outcome} {test}")

    def where(self) -> str:
        return f"{self.name} {self.done}/{self.total}" if self.total else self.name

    def finish(self) -> None:
        """Say the test file that just ended (call once more when pytest exits)."""
        if self.file is not None and self.outcomes:
            counts = ", ".join(f"{n} {outcome}" for outcome, n in self.outcomes.items())
            self.progress.say(f"{self.where()}: {self.file}: {counts}")
        self.file, self.outcomes = None, Counter()

    def quiet(self) -> None:
        self.progress.say(f"{self.where()}: still running" + (f" (the last to end: {self.test})" if self.test else ""))
