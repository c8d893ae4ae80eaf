"""A group option named on the command line must exist — checked before Hydra, with a "did you mean".

Hydra answers ``method=fedcll`` with a search-path dump and a stack-trace hint; ``fedrun`` answers with the field,
the value, the closest options and the whole list. ``protocol=`` is checked the same way. That group is a paper's
data protocol, ``conf/protocol/<method>/<dataset>.yaml``, chosen by ``conf/config.yaml``'s ``optional protocol:
${method}/${dataset}`` (``~protocol`` opts out); Hydra skips an ``optional`` choice that names no file, so it would
drop a misspelt ``protocol=`` without a word. ``steps=`` likewise: a method's measured step sizes with a backbone its
defaults were not chosen on, ``conf/steps/<method>/<backbone>.yaml``, chosen by ``optional steps:
${method}/${backbone}``.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError

CHECKED = ("method", "dataset", "backbone", "privacy", "attack", "defense", "audit", "eval", "sim", "track", "row",
           "setup", "experiment", "protocol", "steps")


def config_dirs() -> list[Path]:
    """fedrun's ``conf/``, then every plugin's config folder (``fedrun.core.plugins``)."""
    from fedrun.core.plugins import plugin_conf_dirs

    return [Path(config_dir()), *plugin_conf_dirs()]


def options(group: str) -> list[str]:
    """Every option of a config group, fedrun's and the plugins': its yaml files, nested folders as ``folder/name``."""
    found = set()
    for conf in config_dirs():
        root = conf / group
        found |= {path.relative_to(root).with_suffix("").as_posix() for path in root.rglob("*.yaml")}
    return sorted(found)


def option_file(group: str, option: str) -> Path:
    """The yaml file of ``group=option``: fedrun's own, else the first plugin's that has it."""
    for conf in config_dirs():
        path = conf / group / f"{option}.yaml"
        if path.is_file():
            return path
    raise ConfigError(group, option, f"one of {', '.join(options(group))}")


def check_group_choices(argv: list[str]) -> None:
    """Each ``group=option`` (``+group=``, ``++group=``, a sweep's ``a,b``) names an option of ``group``."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep or key not in CHECKED or value.startswith(("${", "choice(", "range(", "glob(")):
            continue
        known = options(key)
        for choice in (part.strip() for part in value.split(",")):
            if choice and choice not in known:
                close = difflib.get_close_matches(choice, known, n=3, cutoff=0.6)
                listed = ", ".join(known) if len(known) <= 40 else ", ".join(known[:40]) + f", … ({len(known)} in all)"
                opt_out = " (or ~protocol for the dataset's own)" if key == "protocol" else ""
                hint = f" (closest: {', '.join(close)})" if close else ""
                raise ConfigError(key, choice, f"one of {listed}{opt_out}{hint}")
