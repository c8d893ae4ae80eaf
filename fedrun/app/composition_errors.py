"""Hydra's own errors (a config it cannot compose), worded as fedrun's: one paragraph, exit status 2.

Hydra answers a misspelt key (``sim.epoch=3``) with "Could not override 'sim.epoch'. To append to your config use
+sim.epoch=3" and an OmegaConf dump: its advice adds a key nothing reads and the run goes on without the setting.
fedrun names the key, the closest keys of that node and all of them. The CLI has Hydra raise instead of print
(``HYDRA_FULL_ERROR``) until the app starts, and words what it raised here.
"""

from __future__ import annotations

import difflib

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

SHOWN_KEYS = 40  # keys listed in full; a larger node lists these and a count


def describe(err: Exception) -> str:
    """The text of a composition error: a misspelt key with its closest keys, else Hydra's own message."""
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException) and isinstance(cause.parent_node, DictConfig) and cause.key:
        keys = [str(k) for k in cause.parent_node if not str(k).startswith("_")]  # not _target_
        return unknown_key(str(cause.full_key), str(cause.key), keys)
    text = " ".join(str(err).split())
    if isinstance(cause, OmegaConfBaseException):
        text += " (" + " ".join(str(cause).split()) + ")"
    return text or type(err).__name__


def unknown_key(full_key: str, key: str, keys: list[str]) -> str:
    parent = full_key.rpartition(".")[0] or "the config"
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
    hint = f" (closest: {', '.join(close)})" if close else ""
    listed = ", ".join(keys[:SHOWN_KEYS]) + (f", … ({len(keys)} in all)" if len(keys) > SHOWN_KEYS else "")
    return (f"{full_key} is not a setting: {parent} has no key '{key}'{hint}. Its keys: {listed} "
            "(`fedrun --cfg job` shows the whole config)")
