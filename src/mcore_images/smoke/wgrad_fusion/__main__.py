"""`python -m mcore_images.smoke.wgrad_fusion`: gradient accumulation fusion against the exact sum."""

from mcore_images.smoke.wgrad_fusion.cli import main

raise SystemExit(main())
