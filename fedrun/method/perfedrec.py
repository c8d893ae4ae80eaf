"""PerFedRec (Luo et al., CIKM 2022) as PerFedRec++ states it (Luo et al., TIST 2024, §4.2–4.3, Algorithm 1
without the pre-training stage): the personalized family's protocol (``fedrun.method._personalized``, which
PerFedRec++ composes too) at its defaults — user clusters refitted
on the shared embeddings, cluster-proportional selection, cluster models, local / cluster / global
predictions mixed — on LightGCN over the clients' ego graphs, FedGNN's pseudo items and LDP.

Per round:
  1. selection (§4.3.2): once users are clustered, each cluster contributes clients in
     proportion to its size (``fedrun.method._clusters``); uniform before;
  2. the clients refresh their shared embeddings and expand their ego graphs (FedGNN, §4.2.2);
     the server refits k-means on the shared embeddings every ``recluster_every`` rounds
     (§4.3.1) from round ``cluster_from`` on;
  3. each client downloads the global model (Algorithm 1 l. 21; ``train_from=cluster``: its
     cluster's, as the PerFedRec CIKM code), replaces ``pseudo_share`` of its pairs with pseudo
     items, masks ``mask_share`` (PerFedRec++), trains, uploads the deltas (privacy: the run's
     LDP, Eq. 10);
  4. the server aggregates all uploads into the global model and each cluster's into its
     cluster model (Eq. 11, through the run's defense): Θ_C ← Θ_C + mean of its members' deltas,
     from a copy of the global model at the first clustering.

Prediction (Eq. 6): ŷ_n,i = α1·ŷ^local + α2·ŷ^cluster + α3·ŷ^global, the models combined through
their predictions, as the authors' code does (Eq. 6 writes the parameters; for LightGCN,
whose forward is not linear in them, the scores are what can be mixed without one propagation
per user):
  - ŷ^global: LightGCN on the union of the local graphs with the global item table and the
    clients' rows; ŷ^cluster: the same with the client's cluster's table;
  - ŷ^local: the client's representation in its own ego graph at the end of its last local
    training (kept on the client), scored against its cluster model's item representations.
    fedrun's clients keep no item rows between rounds, so their local model differs from the
    cluster model in the user representation only (the authors' code keeps each client's
    whole model's scores on its test candidates);
  - a term a client does not have yet (no local training, no clusters) is left out and the
    remaining α renormalised (the code: the mean of the others).

Open points and their resolution: the global model takes the mean of the deltas of every
client (which started from their cluster models); the cluster models' tables are updated with
the plain sum of their aggregate (server lr 1); the paper's aggregation weights D_n / Σ D_j
are the defense's ``weighting=data_size`` (the code weighs by cluster size).
"""

from __future__ import annotations

from fedrun.method._personalized import PersonalizedMethod
from fedrun.method.config import PerFedRecConfig


class PerFedRec(PersonalizedMethod):
    Config = PerFedRecConfig
