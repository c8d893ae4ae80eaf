"""The centralized row (``method=central``): the backbone trained on all training data in one place, as the
method base of central training does it (``fedrun.method.centralized``: mini-batch epochs over every pair or
every user's sequence; LightGCN with SGL / SimGCL / XSimGCL through ``method.contrast``) — with no terms of
its own, the rows the backbone scores with are its parameters.

One round = one epoch: every training (user, item) pair once, shuffled, in mini-batches of
``batch_size`` with ``num_negatives`` negatives per positive resampled each epoch; the loss
is the batch mean; one optimizer over all parameters (dense Adam/SGD, as in the usual
PyTorch implementations with non-sparse embeddings).

Sequential backbones (GRU4Rec, BERT4Rec) train on each user's last ``max_len`` items, in
mini-batches of ``sequence_batch`` users, every target position a prediction (S3-Rec /
BERT4Rec style): ``loss=ce`` is the softmax over the whole catalogue, ``bce`` / ``bpr`` use
``num_negatives`` sampled negatives per target.
"""

from __future__ import annotations

from fedrun.method.centralized import CentralMethod
from fedrun.method.config import CentralConfig


class Central(CentralMethod):
    Config = CentralConfig
