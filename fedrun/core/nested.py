"""Walk the tensors of a nested state (dicts, lists, tuples, optimizer states) by dotted name."""

from __future__ import annotations

from typing import Any, Iterator

import torch


def tensors(state: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of ``state``, with a dotted name (``server.optimizer.state.0.exp_avg``)."""
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            yield from tensors(value, f"{prefix}.{index}" if prefix else str(index))
