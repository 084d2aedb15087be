"""Exit codes shared by the launcher and the ranks, so a caller can tell "broken" from "not tested"."""

PASSED = 0
"""Every planned run trained and every check held."""

FAILED = 1
"""The suite started and something failed: a check, a crashed rank, a timed-out collective, the watchdog."""

COULD_NOT_RUN = 2
"""Nothing was tested: bad flags, too few GPUs, torch/megatron-core missing, ranks never started."""


class CouldNotRun(Exception):
    """Raised before any training starts; str() is one line naming the problem and the fix."""
