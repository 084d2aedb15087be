"""GPU smoke suite for Megatron-Core images: real training steps on every parallel layout that fits.

Shipped inside every image at /opt/mcore-images/smoke and run as ``python -m smoke``. It imports only
torch, megatron-core (Transformer Engine when present) and the standard library; the modules
``layouts``, ``shards``, ``tolerance``, ``certificate`` and ``exitcodes`` import without torch so
that host tests and ``--dry-run`` work anywhere.
"""

__version__ = "0.1.0"
