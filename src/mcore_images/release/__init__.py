"""From a built image to a trusted tag: certify (image tests, the smoke, the frameworks' own tests), the registry,
the policy a certificate is judged by, attach/promote/verify, the signed ledger, multi-platform indexes and the
release matrices. Imports the catalogue, resolve and launch, never build."""
