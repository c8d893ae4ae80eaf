"""The ``backbone`` group's settings, one dataclass per option (``backbone=ncf`` → ``NCFConfig``). Torch-free at
import: ``fedrun.app.preflight`` refuses a bad value before torch loads. The models are in
``fedrun/backbone/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.errors import check, check_choice, check_fraction, check_positive

LOSSES = ("bpr", "bce", "mse", "ce")


@dataclass
class BackboneConfig:
    dim: int = 32  # embedding size
    loss: str = "bpr"  # bpr | bce | mse (explicit ratings) | ce (softmax; sequential backbones)
    init_std: float = 0.1  # std of the normal initialisation of embeddings
    l2: float = 0.0  # per-example L2 on the embeddings an example uses (PMF's λ, FedRec's α)

    def __post_init__(self) -> None:
        check(self.dim >= 1, "dim", self.dim, "an integer >= 1")
        check_choice("loss", self.loss, LOSSES)
        check_positive("init_std", self.init_std)
        check_positive("l2", self.l2, allow_zero=True)


LINEAR_INITS = ("glorot", "kaiming")


@dataclass
class NCFConfig(BackboneConfig):
    loss: str = "bce"
    variant: str = "neumf"  # gmf | mlp | neumf
    layers: list[int] = field(default_factory=lambda: [64, 32, 16])  # MLP tower; layers[0] = 2 × MLP embedding size
    linear_init: str = "glorot"  # glorot | kaiming (the A-hum code's kaiming_uniform for ReLU)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("variant", self.variant, ("gmf", "mlp", "neumf"))
        check_choice("linear_init", self.linear_init, LINEAR_INITS)
        check(len(self.layers) >= 1 and all(n >= 1 for n in self.layers), "layers", self.layers,
              "a non-empty list of positive layer sizes")
        check(self.layers[0] % 2 == 0, "layers", self.layers, "layers[0] even (it is 2 × the MLP embedding size)")


MAX_LAYERS = 8  # twice the deepest LightGCN studies (its Table 2: 1-4 layers)


@dataclass
class LightGCNConfig(BackboneConfig):
    dim: int = 64  # embedding size (PerFedRec++ §5.1.3: 64)
    layers: int = 3  # K propagation layers (LightGCN's best on Gowalla)
    l2: float = 5e-5  # on the layer-0 rows of each example (LightGCN decay 1e-4 on ½‖·‖²)
    neighbors: int = 0  # ego graphs: users drawn per item of a client's graph (0: all of them)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.layers <= MAX_LAYERS, "layers", self.layers,
              f"an integer in [0, {MAX_LAYERS}]: LightGCN studies 1-4; a mean over many more layers is each "
              "embedding averaged over its whole connected component (over-smoothing), no longer the model")
        check(self.neighbors >= 0, "neighbors", self.neighbors, "an integer >= 0 (0: every neighbour)")


@dataclass
class BinaryMFConfig(BackboneConfig):
    dim: int = 64  # code length f in bits [LightFR §4.1.4]
    loss: str = "mse"  # squared loss on min-max scaled ratings (Eq. 5)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.dim % 8 == 0, "dim", self.dim, "a multiple of 8 (codes are packed into bytes)")
        check(self.l2 == 0, "l2", self.l2, "0: ||B||² + ||D||² is constant for ±1 codes (LightFR §3.2)")


@dataclass
class SequentialConfig(BackboneConfig):
    loss: str = "ce"  # ce (softmax: full catalogue centrally, Eq. 1's sampled softmax federated) | bce | bpr
    max_len: int = 50  # the most recent items a client's sequence keeps
    dropout: float = 0.0  # dropout on embeddings and hidden states (training only)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.max_len >= 2, "max_len", self.max_len, "an integer >= 2")
        check_fraction("dropout", self.dropout, closed_low=True, closed_high=False)


@dataclass
class BERT4RecConfig(SequentialConfig):
    max_len: int = 200  # N (§4.4: 200 for ML-1m, 50 for Beauty)
    n_layers: int = 2  # L (§4.4)
    n_heads: int = 2  # h (§4.4)
    mask_prob: float = 0.2  # ρ (§4.7: 0.2 for ML-1m, 0.6 for Beauty)
    dropout: float = 0.1  # §4.4

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.n_layers >= 1, "n_layers", self.n_layers, "an integer >= 1")
        check(self.n_heads >= 1 and self.dim % self.n_heads == 0, "n_heads", self.n_heads,
              f"a divisor of dim ({self.dim})")
        check_fraction("mask_prob", self.mask_prob, closed_low=False, closed_high=True)
