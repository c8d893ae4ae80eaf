"""Refuse a bad value before torch loads: every group's fields checked against its option's Config.

A refused value is the error a user meets most, and torch's import is most of what it used to cost (2.3 s of a
quiet 2.6 s). Every shipped option keeps its Config in its group's torch-free ``fedrun/<group>/config.py``, and its
module says so in the source (``Config = FedCLConfig`` beside ``from fedrun.method.config import FedCLConfig``):
``option_config`` reads that from the option's source and imports the config module alone. An option whose Config
is defined in its own module (a plugin's, a dataset's) is imported as it is; that costs what its imports cost.

``plan`` (``fedrun.app.plan``) parses every group again with the option's class itself, and checks what needs the
classes, the data or the device (combinations, capabilities, sizes): it stays the authority; this only answers
earlier.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fedrun.app.build import class_source, parse_config, resolve_target
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from fedrun.kernels.config import SimConfig
from fedrun.store.runs import check_experiment_name

GROUPS = ("dataset", "backbone", "method", "privacy", "attack", "defense", "audit", "eval", "track")
PRESET_GROUPS = ("experiment", "row")  # +experiment=<paper>/<table> and its rows (conf/row/<paper>/)
CHECK_ORDER = ("method", "eval", "track", "dataset", "backbone", "privacy", "attack", "defense", "audit")  # plan's


def check_config(cfg: DictConfig) -> None:
    """Every field of ``sim`` and of each group's option, and the top-level keys: the first bad one raises its
    named ConfigError."""
    check_top_level_keys(cfg)
    parse_config(SimConfig, cfg.sim, "sim")
    for group in CHECK_ORDER:
        node = cfg.get(group)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not target:
            raise ConfigError(f"{group}._target_", target, "the class implementing this option")
        config = option_config(target, group)
        if config is not None:
            parse_config(config, node, group)
    check_experiment_name("experiment_name", cfg.get("experiment_name"))


def option_config(target: str, group: str) -> type | None:
    """The Config of the class ``target`` names: from the module its source imports it from, without importing
    the option's own module, where the source says so; else the class's own ``Config`` (its module imported), or
    None for a class without one (``plan`` refuses it, as not a subclass of the group's base)."""
    module_name, _, class_name = target.rpartition(".")
    parsed = class_source(module_name, class_name)
    source = _config_source(*parsed) if parsed is not None else None
    if source is not None:
        config_module, config_name = source
        try:
            return getattr(importlib.import_module(config_module), config_name)
        except (ImportError, AttributeError):
            pass  # not where the source says: the class itself answers (or raises the named error)
    return getattr(resolve_target(target, group), "Config", None)  # None: plan refuses it (not an option class)


def _config_source(tree: ast.Module, cls: ast.ClassDef) -> tuple[str, str] | None:
    """(module, name) of the ``Config = <Name>`` in the class body, where ``<Name>`` comes from a top-level
    ``from <module> import <Name>`` of the same source; None for anything else (inline, inherited, computed)."""
    assigned = [node.value.id for node in cls.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and any(isinstance(t, ast.Name) and t.id == "Config" for t in node.targets)]
    if len(assigned) != 1:
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == assigned[0]:
                    return node.module, alias.name
    return None


@functools.cache
def known_top_level_keys() -> frozenset[str]:
    """The top-level keys fedrun reads: the groups, ``sim``, and every key ``conf/config.yaml`` or a global preset
    (an experiment, a row, a setting) sets."""
    import yaml

    keys = {*GROUPS, "sim", "hydra"}
    for path in Path(config_dir()).rglob("*.yaml"):
        text = path.read_text()
        if path.parent == Path(config_dir()) or "@package _global_" in text:
            keys |= set(yaml.safe_load(text) or {})
    return frozenset(keys - {"defaults"})


def check_top_level_keys(cfg: DictConfig) -> None:
    """A key no group, preset or setting defines (``+foo=bar``, a misspelt ``+experimnt_name=...``) is refused: it
    would be recorded with the run and read by nothing."""
    known = known_top_level_keys()
    for key in map(str, cfg):
        if key not in known:
            value: Any = OmegaConf.select(cfg, key)
            raise ConfigError(key, value, f"a key fedrun reads: a config group or one of "
                              f"{', '.join(sorted(known - {*GROUPS, 'sim', 'hydra'}))} (`+{key}=...` adds a key "
                              "nothing reads)")
