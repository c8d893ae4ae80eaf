"""SimGCL in federated recommendation: the baseline of rCL4FedRec §5.3 (Yu et al., SIGIR 2022, applied
to the client's embeddings; ``papers/rcl4fedrec.txt``).

SimGCL's views add uniform noise to the embeddings: v' = v + ε', v'' = v + ε'' with
ε = normalise(U(0, 1)^d ⊙ sign(v)) · η, contrasted with InfoNCE (other items as negatives, as Eq. 10).
A client holds one user, so a user-side InfoNCE has no negative users without sharing embeddings
(which the baseline list rules out, §5.3): the federated SimGCL contrasts item views only — the
client step of CL4FedRec with ``user_cl=none`` and ``item_cl=noise`` (which is also Table 5's
"SimGCL-based item views" inside rCL4FedRec). Everything else is the family's (``fedrun.method._contrastive``).
"""

from __future__ import annotations

from fedrun.method._contrastive import ContrastiveMethod
from fedrun.method.config import SimGCLConfig


class SimGCL(ContrastiveMethod):
    Config = SimGCLConfig
