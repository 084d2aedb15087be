"""One call that works on every megatron-core (and torch) release the stacks pin: 0.13 to 0.19 grow and drop
keyword arguments release by release, so an option is passed only where the callee takes it. Standard library
only: the GPT builder's spec choice uses it where no torch is imported (host tests)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def supported(func: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """Keep only the keyword arguments ``func`` accepts (megatron-core grows options release by release)."""
    params = inspect.signature(func).parameters
    return {k: v for k, v in kwargs.items() if k in params}
