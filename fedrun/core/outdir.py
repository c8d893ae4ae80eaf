"""Output folders that no two fedrun processes share.

Hydra names a run's (or a sweep's) folder after the second it started (``${now:%H-%M-%S}``), so two
commands started in the same second — a script launching seeds side by side — wrote into one folder:
one checkpoint file for both runs (the resume path of one restored the other's model), one stop marker
(stopping one sweep stopped the other), one sweep report listing both sweeps' jobs. The resolver
``${fedrun_claim:<folder>}`` (``conf/config.yaml``) creates the folder itself and returns it, or, when
another process created it first, the first free ``<folder>-2``, ``<folder>-3``, …. ``mkdir`` is atomic,
so the claim holds between processes; Hydra caches the value in the config, so a sweep's jobs (in this
process or a launcher's workers) all see the folder their parent claimed.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "fedrun_claim"


def claim(folder: str) -> str:
    """``folder`` if no one has created it yet, else ``folder-2``, ``folder-3``, …: created here, returned."""
    base = Path(folder)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and os.environ.get("RANK", "0") != "0":  # torchrun's other ranks
        base = base.with_name(f"{base.name}-rank{os.environ['RANK']}")  # write nothing there but Hydra's config
    base.parent.mkdir(parents=True, exist_ok=True)
    candidate, number = base, 1
    while True:
        try:
            candidate.mkdir()
            return str(candidate)
        except FileExistsError:
            number += 1
            candidate = base.with_name(f"{base.name}-{number}")


OUTPUT_FIELDS = ("hydra.run.dir", "hydra.sweep.dir")  # where Hydra creates a run's or a sweep's folder
DEFAULT_ROOT = "outputs"  # where conf/config.yaml puts them


def why_not_creatable(folder: str) -> str | None:
    """Why this user cannot create ``folder`` (its nearest existing ancestor is a file, or not writable), or None."""
    path = Path(folder).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def check_output_folders(overrides: list[str]) -> None:
    """Before Hydra runs: the output folder a command's overrides name (``hydra.run.dir=…``, ``hydra.sweep.dir=…``),
    or the default ``outputs/`` under the working directory, can be created — else a named error instead of Hydra's
    ``OSError`` traceback. A value built from interpolations is left to Hydra."""
    from fedrun.errors import ConfigError

    named = {}
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key in OUTPUT_FIELDS and value and "${" not in value:
            named[key] = value
    for field, folder in (named or {"hydra.run.dir (its default, under the working directory)": DEFAULT_ROOT}).items():
        why = why_not_creatable(folder)
        if why is not None:
            raise ConfigError(field, folder, f"a folder this user can create: {why}")


def register() -> None:
    """Make ``${fedrun_claim:…}`` known to OmegaConf (idempotent; cached per config, like Hydra's ``now``)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, claim, use_cache=True)
