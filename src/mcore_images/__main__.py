"""`python -m mcore_images` is the same as the `mcore-images` command."""

from mcore_images.cli import main

raise SystemExit(main())
