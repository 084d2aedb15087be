"""``python -m mcore_images.smoke.bench``: training throughput of reference models (cli: the program; model: configs,
FLOPs and peaks; gate: the regression gate against env/bench-baselines.json, and the bench's Markdown)."""
