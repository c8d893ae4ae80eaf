"""Checks at the phase boundaries of a round: uploads carry only their declared fields, and
nothing non-finite crosses from one component to the next."""

from __future__ import annotations

import torch

from fedrun.backbone.base import PublicParams
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


def check_uploads(uploads: Uploads, public: PublicParams, round_index: int, component: str) -> None:
    """Uploads may hold item-row deltas of the public item table and deltas of public weights only."""
    if uploads.row_delta.shape[1:] != public.item.shape[1:]:
        raise UploadError(f"{component}: item-row deltas of width {tuple(uploads.row_delta.shape[1:])}, "
                          f"the public item rows have {tuple(public.item.shape[1:])}")
    extra = set(uploads.dense) - set(public.net)
    if extra:
        raise UploadError(f"{component}: uploads carry undeclared fields {sorted(extra)}; "
                          f"only deltas of the public weights {sorted(public.net)} may leave a client")
    for name, delta in uploads.dense.items():
        if delta.shape[1:] != public.net[name].shape:
            raise UploadError(f"{component}: delta of {name} has shape {tuple(delta.shape[1:])}, "
                              f"expected {tuple(public.net[name].shape)}")
    check_finite(uploads.row_delta, component, round_index)
    for delta in uploads.dense.values():
        check_finite(delta, component, round_index)
