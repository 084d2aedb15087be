"""``python -m mcore_images.smoke.bridge``: the HF <-> Megatron-Core bridge check (cli: the program; spec: its pure
parts; run: the torch side; cpu: CPU stand-ins for the Transformer Engine modules of a bridge's spec)."""
