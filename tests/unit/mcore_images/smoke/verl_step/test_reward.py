"""The rule reward verl loads by path: graded, model-free, and loadable from the file alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.smoke.verl_step import reward, spec

FILE = Path(reward.__file__)


@pytest.mark.parametrize(("response", "score"), [
    ("n42", 1.0),
    ("say n39 then n45", 1 / 4),  # the closest counts
    ("n1042", 1 / 1001),
    ("no number here", 0.0),
    ("an42 n42x", 0.0),  # only whole number words count
    ("", 0.0),
])
def test_the_score_is_graded_by_the_distance_to_the_target(response: str, score: float) -> None:
    assert reward.compute_score(spec.DATA_SOURCE, response, "n42") == pytest.approx(score)


def test_a_ground_truth_that_is_no_number_word_scores_zero() -> None:
    assert reward.compute_score(spec.DATA_SOURCE, "n42", "forty-two") == 0.0


def test_it_takes_the_keywords_verl_adds_where_a_reward_model_serves() -> None:
    assert reward.compute_score(data_source=spec.DATA_SOURCE, solution_str="n7", ground_truth="n7", extra_info={},
                                reward_router_address="127.0.0.1:1", reward_model_tokenizer=None) == 1.0


def test_it_loads_from_its_file_alone_as_verl_loads_a_custom_reward(tmp_path: Path) -> None:
    """verl imports the file by path (importlib spec_from_file_location): no project package on sys.path."""
    code = ("import importlib.util, sys\n"
            f"s = importlib.util.spec_from_file_location('custom_module', {str(FILE)!r})\n"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            "print(m.compute_score('d', 'n3 n9', 'n10'))\n")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(0.5)


def test_the_made_up_prompts_can_score_above_zero() -> None:
    row = spec.rows("train", 1, seed=5)[0]
    target = row["reward_model"]["ground_truth"]
    assert reward.compute_score(row["data_source"], row["prompt"][0]["content"], target) == 1.0
