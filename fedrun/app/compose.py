"""The config one run would see, composed outside the Hydra app (``fedrun info``, scripts, tests)."""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from fedrun.core.paths import config_dir


def compose(overrides: list[str], keep_hydra: bool = False) -> DictConfig:
    """The config one run with these overrides would see, composed outside the Hydra app (scripts,
    tests): no ``hydra`` node (``keep_hydra``: with it, e.g. a preset's sweeper), and the Hydra choices set so
    presets resolve as in a run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from fedrun.core.plugins import search_path_override

    GlobalHydra.instance().clear()
    overrides = [*overrides, *search_path_override(overrides)]  # the plugins' options (fedrun.core.plugins)
    with initialize_config_dir(config_dir(), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    if not keep_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg
