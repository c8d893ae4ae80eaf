"""Checks at the phase boundaries of a round: uploads carry only their declared fields, and
nothing non-finite crosses from one component to the next."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.backbone.base import PublicParams
from fedrun.core.nested import tensors
from fedrun.errors import FedrunError
from fedrun.types import Uploads


class NumericalError(FedrunError):
    """Training produced a non-finite value."""


class UploadError(RuntimeError):
    """A client upload holds fields the protocol does not declare (a bug in a method)."""


def check_finite(tensor: torch.Tensor, component: str, round_index: int) -> None:
    if tensor.numel() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise NumericalError(
            f"{component} produced {bad} non-finite value(s) in round {round_index}. Lower the learning rate "
            "(method.optimizer.lr, or method.lr / method.server_optimizer.lr where the method has no client "
            "optimizer), or check the data and the method's settings.")


def check_model(state: dict, rounds: int) -> None:
    """Before the test: every floating tensor of the model's state (``Method.state_dict()``) is finite,
    so a run that diverged in its last round fails with its reason instead of being scored on NaN."""
    for name, tensor in tensors(state):
        if tensor.is_floating_point():
            check_finite(tensor, f"the model to be tested ({name})", rounds)


@dataclass(frozen=True)
class UploadSchema:
    """What a protocol lets a client upload: item rows of one shape, and named dense fields."""

    row_shape: tuple[int, ...]
    dense: dict[str, tuple[int, ...]]

    @staticmethod
    def of_public(public: PublicParams) -> "UploadSchema":
        """Deltas of the public item rows and of the public weights (every method but a few)."""
        return UploadSchema(tuple(public.item.shape[1:]), {k: tuple(v.shape) for k, v in public.net.items()})


def check_uploads(uploads: Uploads, schema: UploadSchema, round_index: int, component: str) -> None:
    """Uploads may hold the schema's item rows and dense fields only (by default: deltas of the public
    item table and of the public weights)."""
    if tuple(uploads.row_delta.shape[1:]) != schema.row_shape:
        raise UploadError(f"{component}: item-row deltas of width {tuple(uploads.row_delta.shape[1:])}, "
                          f"the protocol's item rows have {schema.row_shape}")
    extra = set(uploads.dense) - set(schema.dense)
    if extra:
        raise UploadError(f"{component}: uploads carry undeclared fields {sorted(extra)}; "
                          f"only the declared fields {sorted(schema.dense)} may leave a client")
    for name, delta in uploads.dense.items():
        if tuple(delta.shape[1:]) != schema.dense[name]:
            raise UploadError(f"{component}: delta of {name} has shape {tuple(delta.shape[1:])}, "
                              f"expected {schema.dense[name]}")
    check_finite(uploads.row_delta, component, round_index)
    for delta in uploads.dense.values():
        check_finite(delta, component, round_index)
