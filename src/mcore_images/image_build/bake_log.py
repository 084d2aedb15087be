"""What BuildKit's plain progress output says about each step: which bake target and Dockerfile stage it
belongs to, whether it came from the cache, and how long it ran. `build` reads it for its closing summary
per target; build_timing for its per-stage cached/built status."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# "#12 [runtime-debian kernels 1/1] RUN ...": step id, bake target (absent when bake builds one target),
# stage, instruction. FROM steps only resolve an image and are never CACHED, so they say nothing about reuse
# and are left out.
STEP = re.compile(r"^#(\d+) \[(?:([\w.-]+) )?([\w-]+) (\d+)/(\d+)\] (\w+)")
CACHED = re.compile(r"^#(\d+) CACHED")
DONE = re.compile(r"^#(\d+) DONE ([\d.]+)s")


@dataclass
class BakeLog:
    """Fed line by line while bake runs (or with a whole log at once)."""

    steps: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # step id -> (target, stage)
    cached: set[str] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)  # step id -> DONE seconds
    commands: dict[str, str] = field(default_factory=dict)  # step id -> its instruction as BuildKit prints it

    def feed(self, line: str) -> None:
        if (m := STEP.match(line)) and m.group(6) != "FROM":
            self.steps[m.group(1)] = (m.group(2), m.group(3))
            self.commands[m.group(1)] = line[m.start(6):]
        elif m := CACHED.match(line):
            self.cached.add(m.group(1))
        elif m := DONE.match(line):
            self.seconds[m.group(1)] = float(m.group(2))

    @classmethod
    def of(cls, text: str) -> BakeLog:
        log = cls()
        for line in text.splitlines():
            log.feed(line)
        return log

    def stage_status(self) -> dict[str, str]:
        """Per Dockerfile stage: 'cached' when every step of it was CACHED, else 'built'."""
        status: dict[str, str] = {}
        for step, (_, stage) in self.steps.items():
            if step in self.cached:
                status.setdefault(stage, "cached")
            elif step in self.seconds:
                status[stage] = "built"
        return status

    def step_status(self, fragment: str) -> str | None:
        """'cached' when every step whose instruction contains ``fragment`` was CACHED, 'built' when one ran,
        None when no such step was seen."""
        found = [step for step, command in self.commands.items() if fragment in command]
        if not found:
            return None
        return "cached" if all(step in self.cached for step in found) else "built"

    def per_target(self, stage_layer: Mapping[str, str], only: str | None = None) -> dict[str, dict[str, float]]:
        """Per bake target (``<layer>-<stack>``): steps taken from the cache, steps run and the seconds they
        ran, each step counted for the layer its Dockerfile stage belongs to (``stage_layer``: what
        `dockerfile.stage_layers` reads from the Dockerfile the build ran; BuildKit prints a step that
        several targets share once, under any of their names; the stack part of that name is right, the
        layer part need not be). ``only`` names the target of a one-target bake, whose lines carry none."""
        out: dict[str, dict[str, float]] = {}
        for step, (target, stage) in self.steps.items():
            name = target or only
            layer = stage_layer.get(stage)
            if name is None or layer is None or "-" not in name:
                continue
            row = out.setdefault(f"{layer}-{name.split('-', 1)[1]}",
                                 {"steps_cached": 0, "steps_built": 0, "build_s": 0.0})
            if step in self.cached:
                row["steps_cached"] += 1
            elif step in self.seconds:
                row["steps_built"] += 1
                row["build_s"] = round(row["build_s"] + self.seconds[step], 1)
        return out

