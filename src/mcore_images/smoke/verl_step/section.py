"""The verl step's section of the smoke certificate: its report (smoke/kit/sections.py)."""

from mcore_images.smoke.kit import sections
from mcore_images.smoke.verl_step import spec

SECTION = sections.register("verl_step", spec.markdown, schema=spec.SCHEMA, program=__package__)
