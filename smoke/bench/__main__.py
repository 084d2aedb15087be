"""`python -m smoke.bench`: runs `python -m mcore_images.smoke.bench` (see mcore_images/smoke/renamed.py)."""

from mcore_images.smoke.renamed import run_as

run_as("mcore_images.smoke.bench")
