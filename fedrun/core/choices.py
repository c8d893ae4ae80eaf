"""A group option named on the command line must exist — checked before Hydra, with a "did you mean".

Hydra answers ``method=fedcll`` with a search-path dump and a stack-trace hint; ``fedrun`` answers with the field,
the value, the closest options and the whole list. ``protocol=`` is checked the same way. That group is a paper's
data protocol, ``conf/protocol/<method>/<dataset>.yaml``, chosen by ``conf/config.yaml``'s ``optional protocol:
${method}/${dataset}`` (``~protocol`` opts out); Hydra skips an ``optional`` choice that names no file, so it would
drop a misspelt ``protocol=`` without a word.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError

CHECKED = ("method", "dataset", "backbone", "privacy", "attack", "defense", "audit", "eval", "sim", "track", "row",
           "setup", "experiment", "protocol")


def options(group: str) -> list[str]:
    """Every option of a config group: its yaml files, nested folders as ``folder/name``."""
    root = Path(config_dir()) / group
    return sorted(path.relative_to(root).with_suffix("").as_posix() for path in root.rglob("*.yaml"))


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
