"""`docker pull` with progress: an image of 6 GB pulls for minutes, and ``docker pull -q`` said nothing meanwhile.

On a terminal docker draws its own bars (its output goes to stderr, the command's own output stays on stdout). In a
log, where docker prints a line as each layer changes state and no bars, those lines are read and told as steps:
``[run] 1:05 pulling IMAGE: 5/12 layers downloaded``, a line as each layer is downloaded (or extracted) and one after
each quiet stretch (progress.QUIET_S). Docker with the containerd image store (this project's engine) says "Download
complete" last for each layer; the classic store goes on to "Pull complete" once a layer is extracted, which is
counted too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from mcore_images import docker_cli, tools
from mcore_images.progress import Progress

STARTED = re.compile(r"^\S+: Pulling from (?P<repository>\S+)$")
"""docker's first line once the registry has the image (a name it lacks gets an error line alone)."""
LAYER = re.compile(r"^(?P<layer>[0-9a-f]{12}): (?P<status>[A-Za-z][A-Za-z ]*)$")
"""docker's line for a layer's new state, as it prints it without a terminal: ``1a2b3c4d5e6f: Pull complete``."""
DOWNLOADED = frozenset({"Download complete", "Extracting", "Pull complete", "Already exists"})
EXTRACTED = frozenset({"Pull complete"})


@dataclass
class PullSteps:
    """Reads `docker pull`'s lines and says each step of the pull: layers seen, downloaded, extracted."""

    image: str
    progress: Progress
    layers: dict[str, str] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    """docker's lines that are not a layer's state (where it pulls from, the digest, an error)."""

    def counts(self) -> tuple[int, int, int]:
        states = self.layers.values()
        return (len(self.layers), sum(s in DOWNLOADED for s in states), sum(s in EXTRACTED for s in states))

    def summary(self) -> str:
        total, downloaded, extracted = self.counts()
        return f"pulling {self.image}: {downloaded}/{total} layers downloaded" + (
            f", {extracted} extracted" if extracted else "")

    def line(self, text: str) -> None:
        found = LAYER.match(text.strip())
        if not found:
            if STARTED.match(text.strip()):
                self.progress.say(f"pulling {self.image}: not in the local Docker")
            elif text.strip():
                self.said.append(text.strip())
            return
        before = self.counts()[1:]
        self.layers[found["layer"]] = found["status"]
        if self.counts()[1:] != before:  # a layer downloaded or extracted (not merely found)
            self.progress.say(self.summary())

    def quiet(self) -> None:
        self.progress.say(f"{self.summary()} (still pulling)")


def pull(image: str, progress: Progress, terminal: bool | None = None,
         docker: Callable[..., subprocess.CompletedProcess] = tools.run) -> str | None:
    """Pull ``image``, telling its progress; None when it is here, else docker's last word on why not (then nothing
    else was said: a name no registry has is one line, the caller's)."""
    terminal = sys.stderr.isatty() if terminal is None else terminal
    if terminal:  # docker's own bars (and its "Pulling from" line), on stderr; its error lines come back to us
        done = docker_cli.run("pull", image, runner=docker, stdout=sys.stderr, stderr=subprocess.PIPE, text=True,
                              check=False)
        code, said = done.returncode, (done.stderr or "").strip().splitlines()
    else:
        steps = PullSteps(image, progress)
        followed = docker_cli.follow("pull", image, reader=steps)
        code, said = followed.returncode, steps.said
    if code == 0:
        progress.say(f"pulled {image}")
        return None
    return (said or ["no output"])[-1]
