"""The bridge check's section of the smoke certificate: its report (smoke/kit/sections.py)."""

from mcore_images.smoke.bridge import spec
from mcore_images.smoke.kit import sections

SECTION = sections.register("bridge", spec.markdown, schema=spec.SCHEMA, program=__package__)
