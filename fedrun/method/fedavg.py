"""FedAvg on a recommendation backbone (McMahan et al., AISTATS 2017); with MF this is FCF
(Ammad-ud-din et al. 2019): federated collaborative filtering with private user factors.

Client (vectorized over the round's clients): sample ``num_negatives`` negatives per
positive for this round, run ``sim.local_epochs`` full-batch steps of the client optimizer
on (its user row, its copies of the touched item rows, its copy of the shared weights),
upload the item-row deltas and the shared-weight deltas; the user row never leaves.
Server: aggregate per item row (``defense``: mean over uploaders by default) and apply
with the server optimizer (``OptimizerServer``).

Open points and choices: a local epoch is one full-batch step over the client's data;
client optimizer state is fresh every round (clients are stateless between rounds);
negatives are resampled every round (``resample_negatives=false``: drawn once, the A-hum code).

FedSGD fast path (DESIGN.md principle 4): with one local plain-SGD step, no privacy
transform, no attack and a linear aggregation rule, the aggregate of per-client deltas
−η g_c equals −η ∇(Σ_c w_c L_c) / W_i per item row — computed with one backward pass
over the shared rows and no per-client copies. ``sim.fast_path=off`` forces the
general path; a test checks both give the same model.

FedAvg is the method base's default client and server step with its local training composed
(``fedrun.method._training``: the loss reductions, negatives and the FedSGD pass), which the other
methods that train as FedAvg's client compose too; nothing inherits from FedAvg.
"""

from __future__ import annotations

from fedrun.method.config import FedAvgConfig
from fedrun.method.federated import FederatedMethod


class FedAvg(FederatedMethod):
    Config = FedAvgConfig
    has_fedsgd_path = True
    graph_backbones = True  # LightGCN over each client's ego graph (fedrun.kernels.ego)

    @classmethod
    def offers(cls, config: FedAvgConfig) -> frozenset[str]:
        return frozenset({"model_view", "client_step"})
