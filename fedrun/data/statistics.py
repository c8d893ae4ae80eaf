"""Statistics of the training data that a protocol's server may know, by name.

A federated method's server program is built without the client store or the split; what it reads of
the data it declares (``Needs.server_reads`` in ``fedrun.method.federated``) and receives as values
computed here, so the declaration is the whole of what crosses the boundary at construction.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from fedrun.data.splits import Split


def item_popularity(split: Split, n_items: int) -> torch.Tensor:
    """[I] interactions per item in the training part (CL4FedRec's Eq. 4, rCL4FedRec's hot set)."""
    return torch.from_numpy(np.bincount(split.train.item, minlength=n_items))


SERVER_STATISTICS: dict[str, Callable[[Split, int], torch.Tensor]] = {
    "item_popularity": item_popularity,
}


def server_statistics(names: frozenset[str], split: Split, n_items: int) -> dict[str, torch.Tensor]:
    """The declared statistics ``names`` of ``split``'s training part, by name."""
    unknown = sorted(names - set(SERVER_STATISTICS))
    if unknown:
        raise ValueError(f"unknown server statistics {unknown}: known are {sorted(SERVER_STATISTICS)}")
    return {name: SERVER_STATISTICS[name](split, n_items) for name in sorted(names)}
