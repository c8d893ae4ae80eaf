"""The audit contract: an auditor sees exactly what the server sees and reads the truth only when it scores.

In the round (``fedrun.sim.round``) the auditor receives
  - ``observe_shared``: the user representations the clients send in the protocol's exchange before local training
    (FedCL's perturbed user embeddings, the embeddings FedGNN and PerFedRec(++) share), step 2;
  - ``observe``: the benign clients' uploads as they reach the server (after the privacy transform) and the
    senders' ids, step 7.
Both come with the round's ``ServerView``: the public model the clients downloaded and what the protocol lets the
server read (ciphertexts hide values; FullText uploads hide which items were rated) and the public constants of the
client step. The auditor is built from the public sizes and the backbone (an architecture, public) alone, never
from the client store, the split or the private rows (the privacy-boundary test covers it). At the end of the run
the experiment hands it the clients' training and test data to score its guesses against: ``score``. Observing changes
nothing in the round (tested: a run with and without the audit ends at the same state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.data.client_store import ClientStore
from fedrun.types import EmbeddingUploads, RoundContext, Uploads


@dataclass(frozen=True)
class MFStep:
    """The public constants of an explicit-MF client step whose uploads are −γ((u'·v_i − r_ui)u' + λv_i) for
    every rated item i, u' = u − γ(−mean_i (r_ui − u·v_i)v_i + λu) the client's row after its step (FedMF's
    Alg. 2, FedRec's Eq. 3 and 7): what FedMF's rating-inference attack (LightFR Eq. 22–23) needs."""

    lr: float  # γ of the round
    l2: float  # λ


@dataclass(frozen=True)
class CodeStep:
    """The public constants of LightFR's Agg_grad upload Δd_i = (R_ui − s_ui) b_u + α_d d_i (Eq. 12, code units,
    R_ui = f(2r_ui − 1), r_ui the rating min-max scaled over the public range [low, high])."""

    item_self: float  # α_d
    low: float
    high: float


@dataclass(frozen=True)
class ServerView:
    """What the server reads in a round besides the senders' ids."""

    public: PublicParams  # the model the round's clients downloaded
    hidden_ids: str | None = None  # why the uploads do not tell which items a client holds (FullText), or None
    hidden_values: str | None = None  # why the server cannot read the upload values (ciphertexts), or None
    mf_step: MFStep | None = None  # the client step's constants when its uploads are explicit-MF gradients
    code_step: CodeStep | None = None  # the constants when they are LightFR's binary-code gradients


class Auditor:
    Config: ClassVar[type]
    active: ClassVar[bool] = True

    def __init__(self, config: Any):
        self.config = config

    def start(self, n_users: int, n_items: int, backbone: Backbone, device: torch.device) -> None:
        """Size the auditor's state: the public counts and the (public) architecture only."""

    def observe_shared(self, shared: EmbeddingUploads, view: ServerView, ctx: RoundContext) -> None:
        """The user representations ``shared`` the round's clients sent before local training."""

    def observe(self, uploads: Uploads, senders: torch.Tensor, view: ServerView, ctx: RoundContext) -> None:
        """One round of benign uploads ``uploads`` from clients ``senders`` [B] (user ids, in upload order)."""

    def score(self, truth: ClientStore, held_out: ClientStore | None = None) -> dict[str, float]:
        """The attacks' metrics against the clients' true training data ``truth`` and their held-out (test)
        interactions ``held_out`` (read here only)."""
        return {}
