"""The bench's training data: a fresh batch every step, from a language a model can learn.

Every token has ``BRANCHING`` possible successors (a fixed random table), so the per-token loss starts at
ln(vocab) and falls towards ln(BRANCHING) as the model learns the table: a real, slowly falling training
curve on which an FP8 run can be compared with bf16 step by step. (A batch repeated every step is
memorised: the loss collapses to ~0 within 20 steps and relative differences between two runs mean
nothing; measured on dense-1b, bf16 vs FP8 delayed differed by 29 % that way.)
"""

from __future__ import annotations

from typing import Any

BRANCHING = 4


def markov_tokens(vocab: int, sequences: int, length: int, seed: int) -> Any:
    """``sequences`` × ``length`` token ids (CPU, int64) walking a fixed random successor table."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, BRANCHING), generator=gen)
    out = torch.empty(sequences, length, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (sequences,), generator=gen)
    choice = torch.randint(0, BRANCHING, (sequences, length), generator=gen)
    rows = torch.arange(sequences)
    for t in range(1, length):
        out[:, t] = table[out[:, t - 1], choice[rows, t]]
    return out
