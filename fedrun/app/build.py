"""Resolve each config group's `_target_`, validate its fields against the option's Config.

Every option module defines a class whose ``Config`` is a dataclass (fedrun's own live in their group's torch-free
``fedrun/<group>/config.py``, so ``fedrun.app.preflight`` can check them before torch loads). ``build`` merges
the group's YAML node into that dataclass (unknown keys and wrong types fail here),
instantiates it (``__post_init__`` checks values), then constructs the class. Every
failure becomes a :class:`ConfigError` that names ``group.field``, the value and what is
allowed — before any data is read or any training starts. ``check_combination`` then refuses
options that cannot run together, from the capabilities each declares.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from fedrun.errors import ConfigError, check

T = TypeVar("T")


def resolve_target(target: str, group: str, base: type | None = None) -> type:
    """The class ``target`` names, checked to be a ``base`` subclass with a ``Config`` (else a named error). Its
    module is imported only once its source is seen to define the class (``defines_class``): a path to any other
    module (``this.Nothing``, ``os.path.join``) is refused without running it."""
    module_name, _, class_name = target.rpartition(".")
    if not defines_class(module_name, class_name):
        wanted = "an importable class path" if base is None else f"a subclass of {base.__name__}"
        raise ConfigError(f"{group}._target_", target, f"{wanted}, defined in its module's source "
                          f"(fedrun/{group}/<option>.py, or a module of your own)")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"{group}._target_", target, "an importable class path") from None
    if base is not None and not (isinstance(cls, type) and issubclass(cls, base) and hasattr(cls, "Config")):
        raise ConfigError(f"{group}._target_", target, f"a subclass of {base.__name__}")
    return cls


def defines_class(module_name: str, class_name: str) -> bool:
    """Whether the Python source of ``module_name`` defines ``class_name`` at its top level — read, not imported
    (finding the module imports its parent packages only, as every import does)."""
    return class_source(module_name, class_name) is not None


def class_source(module_name: str, class_name: str) -> tuple[ast.Module, ast.ClassDef] | None:
    """The parsed source of ``module_name`` and its top-level ``class_name``, or None where either is missing."""
    if not module_name or not class_name.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    return (tree, found[0]) if found else None


def parse_config(config_cls: type[T], node: DictConfig | dict, group: str) -> T:
    """Merge ``node`` into ``config_cls`` and instantiate it, or raise a named ConfigError."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    values.pop("_target_", None)
    for key in values:
        if key not in fields:
            allowed = "one of the fields " + ", ".join(fields) if fields else "nothing: this option takes no fields"
            raise ConfigError(f"{group}.{key}", values[key], allowed)
    loose = loose_boolean(config_cls, values)
    if loose is not None:
        raise ConfigError(f"{group}.{loose[0]}", loose[1], "true or false")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(config_cls), values)
        config = OmegaConf.to_object(merged)
    except ConfigError as err:
        raise err.prefixed(group) from None
    except (ValidationError, ConfigKeyError) as err:
        key = f"{group}.{err.full_key}" if getattr(err, "full_key", None) else group
        leaf = _field_type(config_cls, str(err.full_key).split(".")) if getattr(err, "full_key", None) else None
        expected = _type_name(leaf) if leaf is not None else "a valid value"
        raise ConfigError(key, getattr(err, "value", None), expected) from None
    except OmegaConfBaseException as err:  # pragma: no cover - other OmegaConf errors
        raise ConfigError(group, values, str(err).splitlines()[0]) from None
    bad = non_finite(config)
    if bad is not None:
        raise ConfigError(f"{group}.{bad[0]}", bad[1], "a finite number")
    return config


def loose_boolean(config_cls: type, values: dict, path: str = "") -> tuple[str, Any] | None:
    """The first (dotted field, value) where a boolean field is given anything but true, false (or null where the
    field allows it), else None. OmegaConf reads ``2``, ``"1"`` and ``"yes"`` as true; a typo or a number given
    to a switch (``sim.keep_best=2``) should not silently turn it on."""
    hints = typing.get_type_hints(config_cls)
    for key, value in values.items():
        declared = hints.get(key)
        if declared is None or value is None:
            continue
        if dataclasses.is_dataclass(declared) and isinstance(value, dict):
            found = loose_boolean(declared, value, f"{path}{key}.")
            if found is not None:
                return found
        elif _is_boolean(declared) and not isinstance(value, bool):
            return f"{path}{key}", value
    return None


def _is_boolean(tp: Any) -> bool:
    """Whether a declared type is ``bool`` or ``bool | None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [option for option in typing.get_args(tp) if option is not type(None)] == [bool]
    return tp is bool


def non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first (dotted field, value) of a parsed config whose number is NaN or ±inf, else None. Every
    number of every option passes here, so no range check downstream ("> 0", "in (0, 1)") sees one."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if dataclasses.is_dataclass(value):
        items = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, inner in items:
        found = non_finite(inner, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _field_type(config_cls: type, path: list[str]) -> Any:
    """The declared type of the field at ``path`` inside nested config dataclasses (``optimizer.lr`` → float), or
    None where the path leaves them (a dict's key, a list's index)."""
    current: Any = config_cls
    for name in path:
        if not (isinstance(current, type) and dataclasses.is_dataclass(current)):
            return None
        current = typing.get_type_hints(current).get(name)
        if current is None:
            return None
    return current


def _type_name(tp: Any) -> str:
    """A declared type as a reader says it: float → "a number", ``float | None`` → "a number or null"."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else ()
    if options:
        named = [_type_name(option) for option in options if option is not type(None)]
        return " or ".join(named + (["null"] if type(None) in options else []))
    name = getattr(tp, "__name__", None) or str(tp)
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}.get(name, name)


def build(node: DictConfig, group: str, base: type[T], **kwargs: Any) -> T:
    """Instantiate the option selected for ``group`` (its ``_target_``), checked against ``base``."""
    if node is None or "_target_" not in node:
        raise ConfigError(f"{group}._target_", None, "the class implementing this option")
    cls = resolve_target(node["_target_"], group, base)
    config = parse_config(cls.Config, node, group)
    return cls(config, **kwargs)


def check_combination(method_cls: type, method_config: Any, backbone: Any, privacy: Any, attack: Any,
                      defense: Any, choices: dict[str, str], sim: Any) -> None:
    """Refuse options that cannot run together, from what each declares (``Needs`` of the method,
    ``linear`` / ``offers_exact_sum`` / ``plain`` of the defense, ``active`` / ``needs`` of the attack,
    ``transforms_uploads`` / ``targets`` of the privacy mechanism, ``user_context`` of the backbone) —
    one line naming both options and why, before any data is read."""
    from fedrun.method.federated import FederatedMethod  # the method contract (a layer below)

    def name(group: str, component: Any) -> str:
        return choices.get(group) or type(component).__name__

    method = f"method={name('method', method_cls)}"
    settings = {"backbone.l2": (backbone.config.l2, 0.0),  # a setting the method never reads is refused
                "sim.local_epochs": (sim.local_epochs, 1)}
    for field, why in method_cls.unread.items():
        value, default = settings[field]
        check(value == default, field, value, f"{default} for {method}: {why}")
    l2 = backbone.config.l2
    if l2:
        check(backbone.user_context != "sequence", "backbone.l2", l2,
              f"0 with backbone {name('backbone', backbone)}: a sequential backbone's users have no row and no "
              "method's loss adds an L2 term to its item rows")
        step_lr = method_cls.l2_step_lr(method_config)
        if step_lr:
            shrink = 1 - 2 * step_lr * l2  # what one local step's L2 term multiplies a user row by
            check(shrink > 0, "backbone.l2", l2,
                  f"a value under {1 / (2 * step_lr):.3g} for {method} at its user rows' lr {step_lr:g}: one local "
                  f"step multiplies each user row by 1 − 2·lr·l2 = {shrink:.3g} through the L2 term, which flips "
                  "the row's sign instead of shrinking it (or lower method.optimizer.user_lr)")
    check(method_cls.trains_backbone or (backbone.user_context == "ids" and not backbone.binary_codes), "backbone",
          name("backbone", backbone), f"an ID-based backbone (mf, pmf, ncf) for {method}: it ranks by training counts "
          f"and trains no model, so a {'binary-code' if backbone.binary_codes else backbone.user_context} backbone "
          "would only mislabel the run")
    check(not backbone.binary_codes or method_cls.binary_backbones, "backbone", name("backbone", backbone),
          f"a real-valued backbone for {method}: {name('backbone', backbone)}'s ±1 codes are trained by discrete "
          "coordinate descent (method=lightfr), not by gradients")
    if getattr(method_config, "duplicate_rows", "sum") == "once":
        check(backbone.user_context == "ids", "method.duplicate_rows", "once",
              f"sum with backbone {name('backbone', backbone)}: once stands for the A-hum code's indexed add because "
              f"a client's repeated uses of a row score it directly and so have equal gradients; a "
              f"{backbone.user_context} backbone's uses differ (propagated or position by position)")
    if backbone.user_context == "graph":
        check(method_cls.graph_backbones, "backbone", name("backbone", backbone),
              f"a backbone without a graph for {method}: it has no propagation step (graph backbones run with "
              "method=central or fedavg)")
    if not issubclass(method_cls, FederatedMethod):
        why = "it trains centrally: no clients upload, so there is nothing to protect, attack or aggregate"
        for group, component, active in (("privacy", privacy, privacy.active), ("attack", attack, attack.active),
                                         ("defense", defense, not defense.plain)):
            check(not active, group, name(group, component), f"{'mean' if group == 'defense' else 'none'} "
                  f"for {method}: {why}")
        return
    needs = method_cls.needs(method_config)
    contexts = " or ".join(sorted(needs.user_contexts))
    check(backbone.user_context in needs.user_contexts, "backbone", name("backbone", backbone),
          f"a backbone whose users are {contexts} for {method}: its client step needs that user context "
          f"({name('backbone', backbone)}'s users are {backbone.user_context}; sequential backbones run with "
          "method=fedcl, bil or central)")
    check(not (needs.plain_uploads and privacy.transforms_uploads), "privacy", name("privacy", privacy),
          f"privacy that leaves model updates as computed (none) for {method}: {needs.plain_uploads}")
    check(not (needs.no_attack and attack.active), "attack", name("attack", attack),
          f"attack=none for {method}: {needs.no_attack}")
    check(not (needs.exact_sum and not defense.offers_exact_sum), "defense", name("defense", defense),
          f"a linear rule with unit weights (mean with weighting=uniform, or sum) for {method}: {needs.exact_sum}")
    offered = method_cls.offers(method_config) | {"fabricated_data", "known_interactions"}
    missing = sorted(set(attack.needs) - offered)
    check(not missing, "attack", name("attack", attack),
          f"an attack that needs no {', '.join(missing)} for {method}: the method offers a malicious client "
          f"{', '.join(sorted(method_cls.offers(method_config)))} only")
    graph = backbone.user_context == "graph"  # clients share embeddings for neighbour expansion (sim.ego)
    check(not (graph and attack.active), "attack", name("attack", attack),
          f"attack=none with {name('backbone', backbone)}: malicious clients have no ego graph in the neighbour "
          "expansion (attacks run with ID backbones)")
    check(backbone.user_context in attack.user_contexts, "attack", name("attack", attack),
          f"attack=none with backbone={name('backbone', backbone)} (its users are {backbone.user_context}): "
          f"{name('attack', attack)}'s clients are users with rows of their own "
          f"({' or '.join(sorted(attack.user_contexts))}; attacks run with ID backbones such as mf or ncf)")
    protected = list(privacy.targets)
    check("user_embedding" not in protected or graph or method_cls.shares_embeddings(method_config), "privacy.targets",
          protected, f"[item_rows] for {method} with these settings: it uploads no user embedding, so the "
          "mechanism would protect nothing")
