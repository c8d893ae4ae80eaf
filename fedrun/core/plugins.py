"""Plugins: options of fedrun's groups (methods, datasets, backbones, attacks, ...) that live outside fedrun.

A plugin is a folder of config groups laid out as ``conf/`` is (``<plugin conf>/method/mymethod.yaml`` with a
``_target_`` naming the plugin's class) plus the importable code that class lives in. fedrun finds it

- installed: a package that declares an entry point in the group ``fedrun.plugins`` whose value is a module;
  the plugin's config folder is the ``conf/`` beside that module's file
  (``[project.entry-points."fedrun.plugins"] myplugin = "myplugin"``);
- or by path: ``FEDRUN_PLUGINS=<conf folder>[:<conf folder> ...]`` (its code importable, e.g. on ``PYTHONPATH``).

Its options are then options like fedrun's own: composed by Hydra (each folder joins Hydra's search path),
checked and refused by name (``fedrun.core.choices``), listed by ``fedrun info`` and ``fedrun --help``, and
checked against the other groups by the capabilities their classes declare. An option of fedrun's own wins over a
plugin's of the same name. A worked example: ``scripts/examples/plugin/`` (tested in ``tests/test_plugins.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

ENTRY_POINTS = "fedrun.plugins"
PLUGINS_VARIABLE = "FEDRUN_PLUGINS"


def plugin_conf_dirs() -> list[Path]:
    """Every plugin's config folder: installed ones (entry points), then ``$FEDRUN_PLUGINS``'s, each once."""
    from fedrun.errors import ConfigError

    found: list[Path] = []
    for entry in _entry_points():
        module_file = getattr(entry.load(), "__file__", None)
        conf = Path(module_file).parent / "conf" if module_file else None
        if conf is None or not conf.is_dir():
            raise ConfigError(f"plugin {entry.name}", entry.value, "a module with a conf/ folder beside its file")
        found.append(conf)
    for part in filter(None, os.environ.get(PLUGINS_VARIABLE, "").split(os.pathsep)):
        conf = Path(part).expanduser().resolve()
        if not conf.is_dir():
            raise ConfigError(PLUGINS_VARIABLE, part, "folders of config groups (a plugin's conf/), "
                                                      f"separated by {os.pathsep!r}")
        found.append(conf)
    return list(dict.fromkeys(found))


def _entry_points() -> list:
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINTS))


def search_path_override(argv: list[str]) -> list[str]:
    """The Hydra override that adds the plugins' folders to the config search path (none without plugins; a
    ``hydra.searchpath=`` the user gave keeps its entries first)."""
    dirs = [f"file://{conf}" for conf in plugin_conf_dirs()]
    if not dirs:
        return []
    given = [arg for arg in argv if arg.lstrip("+").startswith("hydra.searchpath=")]
    if given:
        return []  # the user's own search path stands; they list plugin folders in it themselves
    return [f"hydra.searchpath=[{','.join(dirs)}]"]
