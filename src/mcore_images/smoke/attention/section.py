"""The attention check's section of the smoke certificate: its table (smoke/kit/sections.py)."""

from mcore_images.smoke.attention import table
from mcore_images.smoke.kit import sections

SECTION = sections.register("attention", table.markdown, program=__package__)
