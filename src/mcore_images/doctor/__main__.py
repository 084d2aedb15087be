"""`python -m mcore_images.doctor`: runs where only this package and the standard library exist."""

from mcore_images.doctor import main

raise SystemExit(main())
