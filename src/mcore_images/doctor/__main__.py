"""`python -m mcore_images.doctor`: runs where only this package and the standard library exist."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 - pyproject says 3.11, but the doctor also runs in foreign images
    sys.stderr.write("doctor: needs Python >= 3.11; run it with python3.11 or newer\n")
    raise SystemExit(2)

from mcore_images.doctor.command import main

raise SystemExit(main())
