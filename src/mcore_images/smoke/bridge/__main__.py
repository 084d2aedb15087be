"""`python -m mcore_images.smoke.bridge`: check the HF <-> Megatron-Core bridge(s) of this environment."""

from mcore_images.smoke.bridge.cli import main

raise SystemExit(main())
