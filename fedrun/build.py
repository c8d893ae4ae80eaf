"""Resolve each config group's `_target_`, validate its fields against the option's Config.

Every option module defines a class with a nested ``Config`` dataclass. ``build`` merges
the group's YAML node into that dataclass (unknown keys and wrong types fail here),
instantiates it (``__post_init__`` checks values), then constructs the class. Every
failure becomes a :class:`ConfigError` that names ``group.field``, the value and what is
allowed — before any data is read or any training starts.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from fedrun.errors import ConfigError

T = TypeVar("T")


def resolve_target(target: str, group: str) -> type:
    module_name, _, class_name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"{group}._target_", target, "an importable class path") from None


def parse_config(config_cls: type[T], node: DictConfig | dict, group: str) -> T:
    """Merge ``node`` into ``config_cls`` and instantiate it, or raise a named ConfigError."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    values.pop("_target_", None)
    for key in values:
        if key not in fields:
            raise ConfigError(f"{group}.{key}", values[key], "one of the fields " + ", ".join(fields))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(config_cls), values)
        return OmegaConf.to_object(merged)
    except ConfigError as err:
        raise err.prefixed(group) from None
    except (ValidationError, ConfigKeyError) as err:
        key = f"{group}.{err.full_key}" if getattr(err, "full_key", None) else group
        field = fields.get(str(err.full_key).split(".")[0])
        expected = _type_name(field.type) if field is not None else "a valid value"
        raise ConfigError(key, getattr(err, "value", None), expected) from None
    except OmegaConfBaseException as err:  # pragma: no cover - other OmegaConf errors
        raise ConfigError(group, values, str(err).splitlines()[0]) from None


def _type_name(tp: Any) -> str:
    name = getattr(tp, "__name__", None) or str(tp)
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}.get(name, name)


def build(node: DictConfig, group: str, base: type[T], **kwargs: Any) -> T:
    """Instantiate the option selected for ``group`` (its ``_target_``), checked against ``base``."""
    if node is None or "_target_" not in node:
        raise ConfigError(f"{group}._target_", None, "the class implementing this option")
    cls = resolve_target(node["_target_"], group)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{group}._target_", node["_target_"], f"a subclass of {base.__name__}")
    config = parse_config(cls.Config, node, group)
    return cls(config, **kwargs)
