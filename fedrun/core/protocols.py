"""A paper's data protocol, chosen by the method and the dataset (``conf/protocol/<method>/<dataset>.yaml``).

``conf/config.yaml`` lists ``optional protocol: ${method}/${dataset}``: ``fedrun method=lightfr dataset=filmtrust``
runs LightFR's split of FilmTrust, a pair with no file runs the dataset's own protocol, and ``~protocol`` opts
out. Hydra skips an ``optional`` choice that names no file, so a misspelt ``protocol=...`` on the command line
would be dropped without a word; ``fedrun/core/choices.py`` refuses it before Hydra composes anything.
"""

from __future__ import annotations

from pathlib import Path

from fedrun.core.paths import config_dir


def protocols() -> list[str]:
    """Every ``<method>/<dataset>`` that has a protocol file."""
    root = Path(config_dir()) / "protocol"
    return sorted(path.relative_to(root).with_suffix("").as_posix() for path in root.glob("*/*.yaml"))
