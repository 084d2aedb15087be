"""Identifiers of the JSON documents the project writes, in one place.

Standard library only: the smoke suite (which writes certificates, bench results and bridge reports
inside images) imports it next to torch, and the host tooling reads the same names back.
"""

CERTIFICATE = "mcore-images/smoke-certificate/v1"
BENCH = "mcore-images/bench/v1"
BENCH_BASELINES = "mcore-images/bench-baselines/v1"
BRIDGE = "mcore-images/bridge-check/v1"
VERL_STEP = "mcore-images/verl-step/v1"
CERTIFICATE_ARTIFACT = "application/vnd.mcore-images.certificate.v1+json"
"""The OCI artifact type of a certificate attached to an image digest as a referrer."""

IMAGE_ENVIRONMENT = "image environment"
"""A certificate's environment.source.kind for a run in an image's own settings and pinned versions; the other
kind, MACHINE_TREE, is a checkout on a machine's own Python. Only the first certifies a digest on GPUs."""
MACHINE_TREE = "machine's tree"
