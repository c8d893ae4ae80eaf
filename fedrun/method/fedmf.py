"""FedMF: secure federated matrix factorisation with homomorphic encryption (Chai, Wang, Chen,
Yang, IEEE Intelligent Systems 2020, Alg. 1–2), a federated baseline of LightFR's Table 5.

Explicit-rating MF (PMF's squared loss). Client u in a round (vectorized over the round's clients):
  1. download and decrypt the item matrix V;
  2. U_u ← U_u − γ∇U_u on its ratings, then G = γ∇V for its rated items (Alg. 2), computed as
     FedRec's client step without virtual ratings (``fedrun.method.fedrec``: the user gradient is
     the mean over the rated items, Eq. 7 there; item gradients (U_u·V_i − r_ui)U_u + λV_i);
  3. encrypt G with the users' shared Paillier key and upload the ciphertexts.
Server: Enc(V) ← Enc(V) − Σ_u Enc(G_u) — a sum of ciphertexts (Alg. 1), never a decryption.

``encryption=paillier`` runs exactly that: every value of every upload is encrypted with phe,
the server adds ciphertexts, the clients decrypt the sums (``fedrun.privacy.paillier``); tests
show it equal to the plaintext computation. It costs ~1.5 ms per value at l = 1024 bits, so
real datasets run ``encryption=plaintext``, the same sums in the clear, and log the measured
cost: seconds of encryption per client per round and the ciphertext bytes each way. ``encryption=none``
is the plain federated MF that Chai §3.1 attacks: the gradients travel in the clear (an audit's baseline:
the server infers the ratings from two consecutive uploads, ``fedrun.audit.ratings``).

``mode``: ``part`` (PartText, Chai §3.2) uploads the rated items' rows with their ids — the ids
tell the server which items the user rated; ``full`` (FullText) uploads a row for every item, zeros
for the unrated ones, so the ciphertexts hide them. The sums are identical; traffic and encryption
time are not (accounted per mode; ``full`` with ``encryption=paillier`` encrypts the zero rows).

Open points: Chai's server applies each user's upload as it arrives; one round here applies the
round's clients together (the sum of their uploads), γ is constant (``lr_decay=1``); the item
matrix the server holds stands for Enc(V): clients decrypt it to the same values.
"""

from __future__ import annotations

import torch

from fedrun.audit.base import ServerView
from fedrun.backbone.base import PublicParams
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.rows import LOCAL, RowReducer
from fedrun.method._rating import UNREAD, RatingClient
from fedrun.method.config import FedMFConfig
from fedrun.method.federated import FederatedMethod, Needs, Traffic
from fedrun.method.rating_scale import require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.paillier import PaillierKeys, PaillierSum, ciphertext_bytes
from fedrun.types import RoundContext, Uploads


class FedMF(FederatedMethod):
    Config = FedMFConfig
    unread = UNREAD
    client_program = RatingClient  # FedRec's client step with ρ = 0 (``fedrun.method._rating``)
    client: RatingClient

    def __init__(self, config: FedMFConfig, env):
        require_rating_model(env, "fedmf")
        super().__init__(config, env)
        self.keys = PaillierKeys(config.key_length)  # held by the clients
        self.encryption_seconds = self.keys.seconds_per_encryption()

    @classmethod
    def needs(cls, config: FedMFConfig) -> Needs:
        return Needs(exact_sum="its server adds ciphertexts (a sum)",
                     plain_uploads="its protection is the encryption; the server's sum must be of what clients sent")

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return OptimizerServer(public, ServerOptimizerConfig("sgd", 1.0))  # Enc(V) − Σ_u Enc(G_u): lr 1

    def describe(self) -> dict:
        return {"paillier_ms_per_value": round(1000 * self.encryption_seconds, 4),
                "ciphertext_bytes": ciphertext_bytes(self.config.key_length)}

    def reducer(self) -> RowReducer:
        """``encryption=paillier``: the round's sum is computed on ciphertexts (clients encrypt, the
        server adds, clients decrypt); ``plaintext``: the same sums in the clear."""
        if self.config.encryption in ("plaintext", "none"):
            return LOCAL
        return PaillierSum(self.keys, self.env.n_items if self.config.mode == "full" else None)

    def values_per_client(self, uploads: Uploads) -> torch.Tensor:
        """[B] values each client encrypts and uploads: its rows × d (part) or the catalogue × d (full)."""
        d = uploads.row_delta.shape[1]
        if self.config.mode == "full":
            return torch.full((uploads.n_clients,), float(self.env.n_items * d), dtype=torch.float64)
        return torch.bincount(uploads.row_client, minlength=uploads.n_clients).double() * d

    # -- server side and accounting ----------------------------------------------------------
    def server_view(self, ctx: RoundContext) -> ServerView:
        """Encrypted (``plaintext`` stands for the ciphertexts too), the server reads no upload value, and with
        FullText not even which items were rated; ``encryption=none`` sends the gradients in the clear."""
        encrypted = self.config.encryption != "none"
        hidden_values = f"ciphertexts (encryption={self.config.encryption})" if encrypted else None
        hidden_ids = "FullText uploads a row for every item" if encrypted and self.config.mode == "full" else None
        return ServerView(self.public, hidden_ids, hidden_values, self.client.rating.mf_step(ctx.round))

    def traffic(self, rows: torch.Tensor, uploads: Uploads | None) -> Traffic:
        """The round's traffic is the ciphertexts (and ids in PartText), not the float32 rows; ``encryption=none``:
        the float32 values."""
        if uploads is None:
            raise RuntimeError("FedMF has no fast path: its round always builds the uploads it encrypts")
        values = self.values_per_client(uploads)
        if self.config.encryption == "none":
            ids = 0.0 if self.config.mode == "full" else 4.0 * values.mean() / uploads.row_delta.shape[1]
            return Traffic(4.0 * float(values.mean()) + float(ids), 4.0 * self.public.item.numel())
        cipher = ciphertext_bytes(self.config.key_length)
        ids = 0.0 if self.config.mode == "full" else 4.0 * values.mean() / uploads.row_delta.shape[1]
        return Traffic(float(values.mean()) * cipher + float(ids), float(self.public.item.numel() * cipher),
                       {"encryption_seconds_per_client": float(values.mean()) * self.encryption_seconds})
