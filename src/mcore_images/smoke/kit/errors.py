"""Exit codes shared by every program and rank, so a caller can tell "broken" from "not tested"."""

PASSED = 0
"""Every planned run trained and every check held."""

FAILED = 1
"""The program started and something failed: a check, a crashed rank, a timed-out collective, the watchdog."""

COULD_NOT_RUN = 2
"""Nothing was tested: bad flags, too few GPUs, torch/megatron-core missing, ranks never started."""

STATUS = {PASSED: "passed", FAILED: "failed", COULD_NOT_RUN: "could-not-run"}


class CouldNotRun(Exception):
    """Raised before anything is tested; str() is one line naming the problem and the fix."""


class Stopped(BaseException):
    """SIGINT or SIGTERM reached a program that starts other processes: it stops them, then exits 128 + the
    signal's number, as a shell reports a program the signal ended. A BaseException, so no ``except
    Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def raise_stopped(signum: int, _frame: object) -> None:
    """A signal handler: turn SIGTERM (and SIGINT) into ``Stopped`` on the main thread."""
    raise Stopped(signum)
