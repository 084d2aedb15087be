"""The bench's section of the smoke certificate: its gated table (smoke/kit/sections.py)."""

from typing import Any

from mcore_images.smoke.bench import gate
from mcore_images.smoke.kit import sections


def markdown(bench: dict[str, Any]) -> list[str]:
    """bench.md's text, under the certificate's run table."""
    return ["", gate.render_markdown(bench).rstrip("\n")]


SECTION = sections.register("bench", markdown, schema=gate.RESULT_SCHEMA, program=__package__)
