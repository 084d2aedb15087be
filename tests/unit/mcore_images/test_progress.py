"""progress.py: a line per step with the time since the work started, a line after each quiet stretch, and a program
followed line by line within its time limit."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field

import pytest

from mcore_images import progress
from mcore_images.errors import InputError


@pytest.mark.parametrize(("seconds", "shown"), [(0, "0:00"), (65.9, "1:05"), (3599, "59:59"), (3661, "1:01:01")])
def test_the_clock(seconds: float, shown: str) -> None:
    assert progress.clock(seconds) == shown


def test_a_step_names_its_work_and_the_time_since_it_started() -> None:
    ticks = iter([100.0, 172.5])
    out = io.StringIO()
    progress.Progress("certify", out, now=lambda: next(ticks)).say("image tests 3/10")
    assert out.getvalue() == "[certify] 1:12 image tests 3/10\n"


@dataclass
class Seen:
    lines: list[str] = field(default_factory=list)
    quiet_stretches: int = 0

    def line(self, text: str) -> None:
        self.lines.append(text)

    def quiet(self) -> None:
        self.quiet_stretches += 1


def program(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_each_line_reaches_the_reader_as_it_comes_and_quiet_stretches_are_told() -> None:
    seen = Seen()
    done = progress.follow(program("import time\nprint('a')\ntime.sleep(0.7)\nprint('b', flush=True)\n"
                                   "import sys; print('c', file=sys.stderr)"), seen, every=0.2)
    assert done.returncode == 0 and seen.lines == ["a", "b", "c"] and done.output == "a\nb\nc\n"
    assert seen.quiet_stretches >= 2


def test_a_program_past_its_time_limit_is_stopped() -> None:
    seen = Seen()
    done = progress.follow(program("import time\nprint('started')\ntime.sleep(60)"), seen, every=0.1, timeout=1.0)
    assert done.returncode is None and seen.lines == ["started"]


def test_a_missing_program_is_tools_one_line() -> None:
    with pytest.raises(InputError, match="is not an executable file"):
        progress.follow(["/nonexistent/program"], Seen())
