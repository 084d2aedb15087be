"""The verl step program's reward: a rule on its made-up data, no model.

verl's trainer loads this file by path (``reward.custom_reward_function.path``) and calls ``compute_score`` for
every response, as it calls a user's own reward function. The prompts ask for "a number near nK"; a response
scores 1 / (1 + |J − K|) for the closest number word nJ it holds, 0 for none. Graded, so the random tiny model's
samples of one prompt score differently and GRPO's advantages are not all zero. Standard library only, and no
import of this project: verl may load it in a process that has only this file.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(r"\bn(\d+)\b")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                  **_more: Any) -> float:
    """1 / (1 + the distance from the target to the closest number word of the response); 0 without one.
    verl passes more keywords where a reward model serves (its router address): they are not needed here."""
    target = NUMBER.fullmatch(str(ground_truth).strip())
    found = [int(m) for m in NUMBER.findall(solution_str or "")]
    if target is None or not found:
        return 0.0
    wanted = int(target.group(1))
    return 1.0 / (1.0 + min(abs(n - wanted) for n in found))
