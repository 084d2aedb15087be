"""`python -m mcore_images.smoke.attention`: every attention backend of this environment against an fp32 reference."""

from mcore_images.smoke.attention.cli import main

raise SystemExit(main())
