"""An honest-but-curious server's inference attacks on what it receives (issue #65), each scored at the end of the
run against the clients' training data, each beside its baseline:
  - ``rated_set`` (``fedrun.audit.rated_set``): the clients' items from the ids of the item rows they upload —
    precision, recall and AUC against the base rate;
  - ``shared`` (``fedrun.audit.shared``): the clients' items from the user vectors they share (FedCL, FedGNN,
    PerFedRec(++)) ranked under the public model — recall@K against popularity;
  - ``ratings`` (``fedrun.audit.ratings``): explicit ratings from consecutive real-valued MF gradients (FedMF's
    attack, LightFR Eq. 22–23), or from one round of LightFR's binary-code gradients — MAE against predicting the
    mean;
  - ``membership`` (``fedrun.audit.membership``): whether an uploaded row's item is one of the client's items or a
    sampled negative, from the row's direction along the client's line (attack 4, the signs of the rows) —
    precision against the ids alone, AUC against 0.5.
An attack runs where the server receives what it needs: a method that shares no user vectors gives ``shared``
nothing to see, and one whose uploads are not explicit-MF or binary-code gradients (``ServerView.mf_step``,
``code_step``) nothing to solve.
Where the protocol hides the upload values (ciphertexts) the value attacks see nothing (``audit_values_hidden``);
where it hides which items were rated (FedMF's FullText), the id guess is every item: the base rate, AUC 0.5.
"""

from __future__ import annotations

import torch

from fedrun.audit.base import Auditor, ServerView
from fedrun.audit.config import ServerAuditConfig
from fedrun.audit.membership import SignMembershipInference
from fedrun.audit.rated_set import RatedSetInference
from fedrun.audit.ratings import CodeRatingInference, MFRatingInference
from fedrun.audit.shared import SharedEmbeddingInference
from fedrun.backbone.base import Backbone
from fedrun.data.client_store import ClientStore
from fedrun.errors import check
from fedrun.types import EmbeddingUploads, RoundContext, Uploads


class ServerAudit(Auditor):
    Config = ServerAuditConfig
    config: ServerAuditConfig

    def start(self, n_users: int, n_items: int, backbone: Backbone, device: torch.device) -> None:
        attacks = self.config.attacks
        check(self.config.k <= n_items, "audit.k", self.config.k, f"at most the catalogue's {n_items} items")
        self.rated_set = RatedSetInference(n_users, n_items, device) if "rated_set" in attacks else None
        self.shared = (SharedEmbeddingInference(n_users, n_items, self.config.k, backbone, device)
                       if "shared" in attacks else None)
        self.ratings = (MFRatingInference(n_users, n_items, backbone.config.dim, device)
                        if "ratings" in attacks else None)
        self.code_ratings = CodeRatingInference(n_items, device) if "ratings" in attacks else None
        self.membership = SignMembershipInference(n_users, n_items, device) if "membership" in attacks else None
        self.ids_hidden = self.values_hidden = False

    def observe_shared(self, shared: EmbeddingUploads, view: ServerView, ctx: RoundContext) -> None:
        if self.shared is not None:
            self.shared.observe(shared, view.public)

    def observe(self, uploads: Uploads, senders: torch.Tensor, view: ServerView, ctx: RoundContext) -> None:
        self.ids_hidden |= view.hidden_ids is not None
        self.values_hidden |= view.hidden_values is not None
        if self.rated_set is not None:
            self.rated_set.observe(uploads, senders)
        if view.hidden_values is not None:
            return
        if self.membership is not None:
            self.membership.observe(uploads, senders)
        if self.ratings is not None and view.mf_step is not None:
            self.ratings.observe(uploads, senders, view.public.item, view.mf_step)
        if self.code_ratings is not None and view.code_step is not None:
            self.code_ratings.observe(uploads, senders, view.public.item, view.code_step)

    def score(self, truth: ClientStore, held_out: ClientStore | None = None) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.rated_set is not None:
            metrics.update(self.rated_set.score(truth, blind=self.ids_hidden))
        if self.shared is not None:
            metrics.update(self.shared.score(truth, held_out))
        if self.membership is not None:
            metrics.update(self.membership.score(truth))
        for inference in (self.ratings, self.code_ratings):
            if inference is not None and inference.inferred_keys.numel():
                metrics.update(inference.score(truth))
        if self.values_hidden:
            metrics["audit_values_hidden"] = 1.0
        return metrics
