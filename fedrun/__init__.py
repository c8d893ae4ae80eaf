"""fedrun: a vectorized experiment runner for federated recommender systems.

From Python: ``fedrun.run(*overrides)`` and ``fedrun.compose(*overrides)`` (``fedrun.api``; imported on first use,
so ``import fedrun`` stays light for the command line).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Result", "compose", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedrun import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedrun' has no attribute {name!r}")
