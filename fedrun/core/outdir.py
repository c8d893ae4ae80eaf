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


def register() -> None:
    """Make ``${fedrun_claim:…}`` known to OmegaConf (idempotent; cached per config, like Hydra's ``now``)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, claim, use_cache=True)
