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
