"""FedGNN (Wu et al., "FedGNN: Federated Graph Neural Network for Privacy-Preserving
Recommendation", 2021) — PerFedRec++'s federated GNN baseline (Table 4), on LightGCN.

Per round: the clients refresh their shared user embeddings and expand their local graphs with
the neighbours the matching party sends back (§3.3, ``fedrun.kernels.ego``); each client replaces a
``pseudo_share`` of its pairs with pseudo items (§3.4, ``fedrun.method._pseudo``: the authors' code
replaces 10%, it does not add), trains FedAvg's local step on LightGCN over its ego graph and
uploads the deltas of every row of its local table (real, pseudo and negative items alike);
the server averages them per row.

LDP (§3.4, Eq. 5: g' = clip(g, δ) + Laplace(0, λ), ε = 2δ/λ per coordinate) is the run's
``privacy`` group, applied per client to the item-row uploads before they leave it
(``privacy=ldp privacy.norm=linf privacy.targets=[item_rows,user_embedding]``; the presets set
it). The authors' code averages its Laplace noise over the 256 clients before adding it and
never applies its declared clip; fedrun does neither (REFERENCE §3).

Open points: the paper's graph model is a GAT; PerFedRec++ runs FedGNN on LightGCN (§5.1.2),
which fedrun follows. Any backbone runs (with MF it is FedAvg with pseudo items).
"""

from __future__ import annotations

from fedrun.method.config import FedGNNConfig
from fedrun.method.federated import FederatedMethod


class FedGNN(FederatedMethod):
    Config = FedGNNConfig
    has_fedsgd_path = True
    graph_backbones = True  # LightGCN over each client's ego graph (fedrun.kernels.ego)

    @classmethod
    def offers(cls, config: FedGNNConfig) -> frozenset[str]:
        return frozenset({"model_view", "client_step"})

    def fedsgd_exact(self) -> bool:
        """The FedSGD pass trains the stored pairs: exact only when no pair is replaced or masked."""
        return super().fedsgd_exact() and not self.config.perturbs_pairs
