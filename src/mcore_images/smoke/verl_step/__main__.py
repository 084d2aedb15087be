"""`python -m mcore_images.smoke.verl_step`: verl's own training step (engine and GRPO) on this environment's GPU."""

from mcore_images.smoke.verl_step.cli import main

raise SystemExit(main())
