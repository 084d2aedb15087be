"""What each stack's images were proven to do on a GPU, and where: the one place README's image table reads it from.

A CPU proof follows from a stack's bake group (CI certifies the `ci` group on every commit, the nightly workflow the
`nightly` group; image/regions.py says so). A GPU proof is a run someone made and recorded: the machine, the day,
what ran and passed, and what differed from the image (a replica of its locks over a GPU host's own Python and torch,
where the image could not be built or run there). A stack with no such run reads "not yet" on a GPU, with why where
that is known. When a GPU run passes, its record goes here (and its evidence in docs/), and `make update` rewrites
the table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRun:
    """A recorded run on a GPU that passed."""

    date: str
    """The day it ran (ISO 8601)."""
    machine: str
    ran: str
    """What ran and passed, as a clause: "the smoke and the bridge check"."""
    differed: str
    """What differed from the image, as a clause: "a replica of its locks over the host's Python 3.12"."""
    evidence: str
    """Where the run's record is (a page of docs/)."""

    def said(self) -> str:
        return f"{self.ran} passed on {self.machine}, {self.date}, in {self.differed} ({self.evidence})"


@dataclass(frozen=True)
class NotYet:
    """No GPU run has passed; ``why`` says what stands in the way, where that is known."""

    why: str = ""

    def said(self) -> str:
        return "not yet" + (f": {self.why}" if self.why else "")


GPU: dict[str, GpuRun | NotYet] = {
    "cuda": NotYet("in its replica on an H100 (2026-12-06) the attention check, the fusion module and verl's engine "
                   "step passed, and the smoke stopped at its checkpoint round trip on an NCCL error "
                   "(docs/measurements/2026-12-06-cuda-replica-te2.18/)"),
    "ngc": NotYet("its base image is out of reach of the machines that ran GPU work"),
    "debian": GpuRun("2026-12-03", "one H200", "the smoke and the bridge check",
                     "a replica of its locks over the host's Python 3.12 and torch 2.11.0+cu130 (the image: Python "
                     "3.13), before this project's gradient accumulation fusion module", "docs/bench.md"),
    "debian-mcore019": NotYet(),
    "debian-verl": NotYet("verl 0.8's Megatron path imports FlashAttention 2's bert_padding, which no image has"),
}
"""Each stack of env/stacks.json: its GPU run, or why it has none (a test keeps the two lists equal)."""
