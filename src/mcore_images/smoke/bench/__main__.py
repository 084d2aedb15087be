"""`python -m mcore_images.smoke.bench`: tokens/s, TFLOP/s per GPU and MFU of reference models, gated against
baselines."""

import os
import sys

from mcore_images.smoke.bench.cli import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # skip interpreter shutdown with megatron-core loaded (seconds; results are written)
