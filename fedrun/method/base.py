"""Method interface. A method trains in rounds and scores items for evaluation.

Federated methods subclass :class:`fedrun.method.federated.FederatedMethod` and fill its
hooks; the round loop itself exists once, there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch

from fedrun.data.client_store import ClientStore
from fedrun.kernels.env import RunEnv


@dataclass
class RoundStats:
    loss: float  # mean training loss of the round's clients (or batches)
    n_clients: int = 0
    bytes_up: float = 0.0  # mean bytes uploaded per participating client
    bytes_down: float = 0.0  # mean bytes downloaded per participating client
    extra: dict[str, float] = field(default_factory=dict)


class Method:
    Config: ClassVar[type]
    graph_backbones: ClassVar[bool] = False  # trains graph backbones (LightGCN): propagation over a graph
    binary_backbones: ClassVar[bool] = False  # trains ±1 codes by discrete steps (LightFR's DCD on BinaryMF)
    trains_backbone: ClassVar[bool] = True  # False: it scores without a model (popularity); the backbone only says
    # whether ratings or rankings are evaluated, and one that is not ID-based would label the run with a model it lacks
    # Settings its training never reads ("backbone.l2", "sim.local_epochs"), each with why: the run refuses
    # any value but the default (0, 1) instead of ignoring it.
    unread: ClassVar[dict[str, str]] = {}

    @classmethod
    def l2_step_lr(cls, config: Any) -> float | None:
        """The lr of the plain-SGD local step on a private user row u whose L2 term's gradient is 2·l2·u (u's
        ‖u‖² in each example, the loss their mean): through that term one step multiplies the row by
        1 − 2·lr·l2, which ``fedrun.app.build.check_combination`` keeps above 0. None where the method's L2 is
        not such a step (Adam, momentum, a summed loss, no private row)."""
        return None

    def __init__(self, config: Any, env: RunEnv):
        self.config = config
        self.env = env

    def rounds_per_epoch(self) -> int:
        raise NotImplementedError

    def check_length(self, rounds: int) -> None:
        """Refuse, before training, a setting that needs more than the run's ``rounds`` to mean what the run's
        label says (PerFedRec++ that only pre-trains); nothing by default."""

    def train_round(self, round_index: int) -> RoundStats:
        raise NotImplementedError

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """users [U] → scores over the whole catalogue [U, n_items] (on each client's device).

        ``history``: the stores whose rows, in order, form each user's history at this point
        of the protocol (train; train then validation at test time). Sequential backbones
        infer the user from it; ID-based models ignore it."""
        raise NotImplementedError

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """users [N], items [N] → predicted scores / ratings [N]."""
        raise NotImplementedError

    @torch.no_grad()
    def rank_pairs(self, users: torch.Tensor, items: torch.Tensor,
                   history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """users [N], items [N] → scores that order each user's candidates (sampled ranking
        metrics). The predicted score for every model but a rating baseline whose rating
        prediction does not rank (popularity predicts the mean rating for every pair)."""
        return self.score_pairs(users, items, history)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training (parameters, optimizer and server state)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        """Choices made at run time that belong in the run's params (e.g. which path is used)."""
        return {}

    def clear_private_uploads(self, privacy: Any) -> list[str]:
        """The private parameters this protocol uploads that no privacy mechanism covers (the run says so
        plainly: a log line and the ``fedrun.clear_uploads`` tag). None by default: clients upload
        public-parameter updates only, and central methods upload nothing."""
        return []
