"""``python -m mcore_images.smoke.verl_step``: verl's own Megatron engine and one GRPO step of verl's trainer on a
tiny model made on the spot (cli: the program; spec: its pure parts and verdicts; reward: the rule reward verl
loads by path; flash_imports: where verl's Megatron path imports FlashAttention; assets, config, engine,
engine_case, grpo: the transformers, Hydra, verl and vLLM side)."""
