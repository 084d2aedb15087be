"""`python -m smoke.bridge`: runs `python -m mcore_images.smoke.bridge` (see mcore_images/smoke/renamed.py)."""

from mcore_images.smoke.renamed import run_as

run_as("mcore_images.smoke.bridge")
