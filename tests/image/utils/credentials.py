"""Where credentials live in an image, in one place: the final-filesystem check (shared_checks/hygiene.py)
and the layer scan (saved_layers.py, deleted files too) read the same lists."""

from __future__ import annotations

import re

CREDENTIAL_FILES = (
    ".netrc", ".git-credentials", ".pypirc", ".npmrc", ".docker/config.json", ".aws/credentials",
    ".config/gcloud/credentials.db", ".config/gcloud/application_default_credentials.json", ".kube/config",
    ".huggingface/token", ".cache/huggingface/token", ".ssh/id_rsa", ".ssh/id_ecdsa", ".ssh/id_ed25519",
    ".config/pip/pip.conf",
)
"""Where tools keep credentials, below a home folder: none may ship (a build's token or key copied in)."""
HOME_ROOTS = ("/root", "/home/*", "/workspace", "/opt/mcore-images")
"""The folders a build's user files land in (shell globs)."""
KEY_ROOTS = (*HOME_ROOTS, "/etc")
"""Where a file holding a private key is a leak (site-packages ship test keys; these folders ship none)."""
PRIVATE_KEY = "PRIVATE KEY-----"
"""The line every PEM private key has (RSA, EC, OpenSSH, PKCS#8, encrypted)."""

def _roots(globs: tuple[str, ...]) -> str:
    return "|".join(re.escape(g).replace(r"\*", "[^/]+") for g in globs)


_FILES = "|".join(re.escape(f) for f in CREDENTIAL_FILES)
CREDENTIAL_PATH = re.compile(f"^({_roots(HOME_ROOTS)})/(.+/)?({_FILES})$")
"""A credential file below a home folder, in a layer's path form (/root/.aws/credentials)."""
KEY_PATH = re.compile(f"^({_roots(KEY_ROOTS)})/")
