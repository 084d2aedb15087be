"""verl's trainer configuration for the GRPO step, composed from verl's own config folder with the program's
overrides (Hydra's compose API: what ``python -m verl.trainer.main_ppo`` builds before it starts Ray), and
checked by verl's own config validation, which runs on a CPU.

Imports hydra and verl when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONFIG_NAME = "ppo_trainer"
"""main_ppo's default config (``@hydra.main(config_name="ppo_trainer")``); ``model_engine=megatron`` selects the
Megatron actor, reference and critic (verl 0.8 and 0.9; ppo_megatron_trainer.yaml is its deprecated alias)."""


def config_dir() -> Path:
    """verl's trainer config folder, as installed."""
    import verl

    return Path(verl.__file__).resolve().parent / "trainer" / "config"


def compose(overrides: list[str]) -> Any:
    """verl's trainer config with ``overrides``, as main_ppo composes it (a DictConfig)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return hydra_compose(config_name=CONFIG_NAME, overrides=overrides)


def validate(config: Any) -> None:
    """verl's checks of a trainer config, as main_ppo runs them before Ray starts (raises what verl raises)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def summary(config: Any) -> dict[str, Any]:
    """What the composed config says runs: the trainer, the engines, the bridge, attention and rollout."""
    from omegaconf import OmegaConf

    def pick(key: str) -> Any:
        value = OmegaConf.select(config, key, default=None)
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    keys = ("model_engine", "algorithm.adv_estimator", "trainer.use_v1", "trainer.v1.trainer_mode",
            "actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy",
            "actor_rollout_ref.actor.megatron.use_mbridge", "actor_rollout_ref.actor.megatron.vanilla_mbridge",
            "actor_rollout_ref.ref.megatron.vanilla_mbridge",
            "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend",
            "actor_rollout_ref.ref.megatron.override_transformer_config.attention_backend",
            "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.mode", "actor_rollout_ref.rollout.n",
            "actor_rollout_ref.actor.use_kl_loss", "reward.custom_reward_function.path", "trainer.logger",
            "trainer.n_gpus_per_node", "trainer.total_training_steps")
    return {key: pick(key) for key in keys}
