"""FedCL: federated contrastive learning for privacy-preserving recommendation (Wu, Wu, Qi, Huang, Xie, 2022 —
``papers/fedcl.txt``), Algorithm 1: the retrieval family's training (``fedrun.method._retrieval``, which BIL
composes too) at the paper's settings — each client uploads its LDP-noised
user embedding, the server clusters them and sends each client T semi-hard negatives, the client mixes them with
in-batch and local negatives into Eq. 1. With ``semi_hard=0`` and in-batch negatives off it is the paper's "+Fed"
baseline.

Each round, for the sampled clients (vectorized):
  1. each client infers its user embedding u_i (ID-based backbones: its private row) and
     uploads û_i = clip(u_i, δ) + Laplace(0, 2δ/ε) (``privacy=ldp``, §3.1, Alg. 1 l. 6–8);
  2. the server caches û_i, clusters, retrieves per centroid the top R% items and sends
     each client T semi-hard negatives (``fedrun.retrieval.hard_negatives``, l. 10–14);
  3. each client mixes in-batch, local and semi-hard negatives into Eq. 1,
        L_i = −Σ_j log( exp(u·p_j) / (exp(u·p_j) + Σ_{n ∈ N_j} exp(u·n)) ),
     with the backbone's score in place of u·n, trains locally and uploads its model update;
     the server aggregates (``defense``) and applies it (``server_optimizer``, l. 16–23).
Sequential backbones (GRU4Rec, BERT4Rec): the uploaded user embedding is the next-item query
the client's training history infers under the public encoder, and Eq. 1 runs once per target
position of its (last ``max_len``) sequence with that position's query; in-batch negatives
are the client's other sequence items (repeats of the target item left out).
With ``semi_hard=0`` and in-batch negatives off this is the paper's "+Fed" baseline (local
negatives only, the same training otherwise).
With one local plain-SGD step and no upload transform the round takes the FedSGD fast path
(``fast_round``: one backward on the shared weights, no per-client copies; unpadded for
ID-based backbones; the same model as step 3 on copies, tested; ``sim.fast_path=off`` forces
the copies).

Choices where the paper is open (each a config field, logged with the run):
  - Optimisation: "Adam, lr 1e-3, 16 users per update" is read as the server applying
    Adam (lr 1e-3) to the mean of the clients' updates, clients taking one local step
    (``sim.local_epochs``) of plain SGD; the client's lr moves only its private user row
    (the server's Adam normalises the item/network updates). L_i is the mean (not the sum)
    over the client's positives; with Adam at the server the scale does not matter.
  - Local negatives: a simulated store of ``local_store`` (100) items per client drawn
    uniformly from its non-positives, fixed for the run; each positive uses
    ``local_negatives`` (10) of them drawn with replacement, redrawn every round.
  - In-batch negatives need a user representation that differs per positive (§3.2: not
    usable with ID-based user models); ``in_batch=auto`` turns them on only for sequential
    backbones. §3.2 takes every other item of the client's sequence; for next-item prediction the
    items after the target are the user's own future positives, so ``in_batch_scope=past`` keeps
    only the items before the target position (not in the paper: the reading under which in-batch
    negatives cannot contradict the next-item task; docs/reproductions/fedcl.md).
    Measured (GRU4Rec on ML-1M and Yelp): the in-batch negatives are what puts FedCL below "+Fed";
    without them (``in_batch=off``) the semi-hard negatives lift it above "+Fed" (docs/reproductions/fedcl.md).
  - L2 (``backbone.l2``; the paper names none): per positive, l2·(‖u‖² + ‖p‖²
    + Σ‖n‖² over its local negatives), averaged over the client's positives as Eq. 1 is, like the other
    methods' per-example L2. The semi-hard negatives (sent by the server, shared by all the client's
    positives) carry none. Sequential backbones have no user row and refuse it (``fedrun.app.build``). One
    local step multiplies a user row by 1 − 2·user_lr·l2 through it: l2 ≥ 1 / (2·user_lr) (.05 at lr 10)
    would flip the row's sign each step, and is refused (measured: l2 .1 diverged, docs/results/below-floor.md).
    The NCF presets (``backbone=fedcl/ncf``) use 3e-2, chosen on ML-1M and Sports validation from 1e-3 / 1e-2
    / 3e-2: without it the federated NeuMF overfits and the "+Fed" rows sat at the popularity floor (issue #35).
  - Semi-hard negatives that are the client's own positives are dropped from its softmax
    (the client knows its data; the server does not): ``exclude_positives``.
  - Server cache, clustering schedule, Ward on many points: see ``hard_negatives``.
"""

from __future__ import annotations

from fedrun.method._retrieval import RetrievalMethod
from fedrun.method.config import FedCLConfig


class FedCL(RetrievalMethod):
    Config = FedCLConfig
