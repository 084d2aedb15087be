"""The environment the tool's own pip and uv run in when they read or resolve against the package index.

They judge a stack's versions, not the environment the tool happens to run in: a caller's constraint file
(an image sets PIP_CONSTRAINT to hold its own pins) would make `outdated` and `lock` fail on every candidate
that file does not allow ("cannot read torch 2.15.0's requirements … ResolutionImpossible"). So those settings
are left out; everything else (the index URL, certificates, proxies) is the caller's.
"""

from __future__ import annotations

import os

CALLERS_OWN = ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "UV_CONSTRAINT", "UV_OVERRIDE", "UV_BUILD_CONSTRAINT",
               "PIP_REQUIRE_VIRTUALENV")
"""What pins or restricts the environment the tool runs in, rather than the stack it judges."""


def resolver_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CALLERS_OWN}
