"""`python -m mcore_images.smoke`: plan, launch (under torchrun) and certify the smoke runs."""

from mcore_images.smoke.cli import main

raise SystemExit(main())
