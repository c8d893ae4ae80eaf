"""The ``method`` group's settings, one dataclass per option (``method=fedcl`` → ``FedCLConfig``), with the
paper's defaults and, beside each field, where the paper (or its code) sets it; the families' shared settings
come first. Torch-free at import: ``fedrun.app.preflight`` refuses a bad value before torch loads. The methods,
with the equations they implement, are in ``fedrun/method/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fedrun.errors import check, check_choice, check_fraction, check_positive
from fedrun.kernels.config import ClientOptimizer, ServerOptimizerConfig
from fedrun.retrieval.config import HardNegativeConfig

# The settings families of methods share (each option's config below restates the defaults of its paper).


@dataclass
class LocalTrainingConfig:
    """The default client step's settings (FedAvg's defaults; every option built on it restates its own)."""

    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("sgd", 0.3, user_lr=3.0))
    num_negatives: int = 1  # negatives per positive (ignored for mse)
    resample_negatives: bool = True  # draw them afresh every round | false: once, for the whole run (A-hum code)
    server_optimizer: ServerOptimizerConfig = field(default_factory=ServerOptimizerConfig)
    loss_reduction: str = "balanced"  # balanced: LocalTraining.loss | mean: per-client mean | sum (FedRecAttack code)
    l2_scope: str = "example"  # example: backbone.l2 per example | client: ½·l2·(‖u‖² + Σ‖v‖² over its rows), once
    duplicate_rows: str = "sum"  # sum: a row several examples use gets their gradients' sum | once: one (A-hum code)

    def __post_init__(self) -> None:
        check(self.num_negatives >= 0, "num_negatives", self.num_negatives, "an integer >= 0")
        check_choice("loss_reduction", self.loss_reduction, ("mean", "sum", "balanced"))
        check_choice("l2_scope", self.l2_scope, ("example", "client"))
        check_choice("duplicate_rows", self.duplicate_rows, ("sum", "once"))

    def l2_step_lr(self) -> float | None:
        """Per-example L2 on a loss that is the client's mean (``balanced`` too, for the user row): each
        example holds ‖u‖², so a plain-SGD step shrinks u by 2·user_lr·l2 through it (``Method.l2_step_lr``)."""
        mean_l2 = self.loss_reduction in ("mean", "balanced") and self.l2_scope == "example"
        return self.optimizer.private_lr if mean_l2 and self.optimizer.is_plain_sgd else None


@dataclass
class PairPerturbationConfig:
    """The settings of both, for a method config that composes them beside its local training's."""

    pseudo_share: float = 0.1  # share of each client's pairs replaced by pseudo items (the code: 10%)
    mask_share: float = 0.0  # share of the rest treated as not held for the round (PerFedRec++'s masking)

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the local training's checks (next in the config's MRO)
        check_fraction("pseudo_share", self.pseudo_share, closed_low=True, closed_high=False)
        check_fraction("mask_share", self.mask_share, closed_low=True, closed_high=False)

    @property
    def perturbs_pairs(self) -> bool:
        return bool(self.pseudo_share or self.mask_share)


@dataclass
class RatingConfig:
    lr: float = 0.5  # γ (paper 0.8 [FedRec++ §5.2] diverges here: docs/reproductions/fedrecpp.md)
    lr_decay: float = 0.9  # γ ← 0.9γ after every iteration (Alg. 1 line 20)
    rho: float = 0.0  # ρ: sampled unrated items per rated item
    t_predict: int = 10  # iterations with the user's mean as virtual rating before predicting (Eq. 1)
    t_local: int = 10  # local steps training the copy U'_u that predicts virtual ratings

    def __post_init__(self) -> None:
        check_positive("lr", self.lr)
        check_fraction("lr_decay", self.lr_decay, closed_low=False, closed_high=True)
        check_positive("rho", self.rho, allow_zero=True)
        check(self.t_predict >= 0, "t_predict", self.t_predict, "an integer >= 0")
        check(self.t_local >= 0, "t_local", self.t_local, "an integer >= 0")


@dataclass
class RetrievalConfig(HardNegativeConfig):
    """The family's settings, at FedCL's values."""

    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("sgd", 10.0))
    server_optimizer: ServerOptimizerConfig = field(default_factory=lambda: ServerOptimizerConfig("adam", 1e-3))
    local_store: int = 100  # simulated local negative store per client
    local_negatives: int = 10  # local negatives per positive, drawn from the store
    in_batch: str = "auto"  # auto (sequential backbones only) | on | off
    in_batch_scope: str = "all"  # all: the client's other items (§3.2) | past: only those before the target
    exclude_positives: bool = True  # drop semi-hard negatives that are the client's own positives

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.local_store >= 0, "local_store", self.local_store, "an integer >= 0")
        check(self.local_negatives >= 0, "local_negatives", self.local_negatives, "an integer >= 0")
        check(self.local_negatives == 0 or self.local_store >= 1, "local_store", self.local_store,
              "an integer >= 1 when local_negatives > 0")
        check_choice("in_batch", self.in_batch, ("auto", "on", "off"))
        check_choice("in_batch_scope", self.in_batch_scope, ("all", "past"))


USER_VIEWS = ("synthetic", "none")


@dataclass
class ContrastiveConfig(LocalTrainingConfig):
    """The family's settings, at CL4FedRec's paper values; each option's config restates its own."""

    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("adam", 1e-3))
    loss_reduction: str = "sum"  # Eq. 1 and Eq. 10 are sums
    num_negatives: int = 4  # "negative instances are sampled with 1:4 ratio" (§5.1)
    user_cl: str = "synthetic"  # synthetic: Eq. 6–7 | none (Table 4 "− user CL"; SimGCL, UNION)
    item_cl: str = "step"  # step: Eq. 8–10 | noise: SimGCL views (Table 5) | none
    lambda_user: float = 0.5  # λ1
    lambda_item: float = 0.5  # λ2
    tau: float = 0.2
    eta: float = 0.1  # ‖ε‖ of the uniform-noise views
    synthetic_users: int = 60  # |U_syn|: 60 on ML-1M and QB-Article, 10 on the Amazon sets (§5.4)
    synthetic_items: int = 30  # N
    synthetic_sampling: str = "popularity"  # popularity (Eq. 4) | uniform (Table 5 "random synthetic users")
    synthetic_fit_steps: int = 100
    synthetic_fit_lr: float = 0.01
    item_view_lr: float | None = None  # null: the client optimizer's first step
    uniformity_alpha: float = 0.0  # α of the proof of concept (Eq. 13): the client adds α·L_uni (Eq. 12)
    item_views: ClassVar[tuple[str, ...]] = ("step", "noise", "none")  # the item_cl this method's client builds

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("user_cl", self.user_cl, USER_VIEWS)
        check_choice("item_cl", self.item_cl, self.item_views)
        for name in ("lambda_user", "lambda_item", "uniformity_alpha"):
            check_positive(name, getattr(self, name), allow_zero=True)
        check_positive("tau", self.tau)
        check_positive("eta", self.eta)
        check(self.synthetic_users >= 1, "synthetic_users", self.synthetic_users, "an integer >= 1")
        check(self.synthetic_items >= 1, "synthetic_items", self.synthetic_items, "an integer >= 1")
        check_choice("synthetic_sampling", self.synthetic_sampling, ("popularity", "uniform"))
        check(self.synthetic_fit_steps >= 0, "synthetic_fit_steps", self.synthetic_fit_steps, "an integer >= 0")
        check_positive("synthetic_fit_lr", self.synthetic_fit_lr)
        if self.item_view_lr is not None:
            check_positive("item_view_lr", self.item_view_lr)


@dataclass
class PersonalizedConfig(PairPerturbationConfig, LocalTrainingConfig):
    """The family's settings: FedAvg's local training, the pseudo items, the clusters and the mixture."""

    clusters: int = 5  # C, k-means clusters (the authors' code: 5)
    clustering: str = "kmeans"  # kmeans | random (Table 5's "w/o clustering": users put in random clusters)
    alpha: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])  # local, cluster, global (normalised)
    selection: str = "cluster"  # cluster: clients in proportion to cluster sizes | uniform
    train_from: str = "global"  # global: the downloaded global model (Algorithm 1) | cluster: its cluster's (CIKM)
    cluster_from: int = 1  # first round with clusters (the code: after the first)
    recluster_every: int = 1  # rounds between k-means refits (the paper: every iteration)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.clusters >= 1, "clusters", self.clusters, "an integer >= 1")
        check(len(self.alpha) == 3 and all(a >= 0 for a in self.alpha) and sum(self.alpha) > 0, "alpha",
              list(self.alpha), "three weights >= 0 (local, cluster, global), not all 0")
        check_choice("selection", self.selection, ("cluster", "uniform"))
        check_choice("clustering", self.clustering, ("kmeans", "random"))
        check_choice("train_from", self.train_from, ("global", "cluster"))
        check(self.cluster_from >= 0, "cluster_from", self.cluster_from, "an integer >= 0")
        check_positive("recluster_every", self.recluster_every)


KINDS = ("none", "sgl", "simgcl", "xsimgcl")


@dataclass
class ContrastConfig:
    kind: str = "none"  # none | sgl | simgcl | xsimgcl (graph backbones)
    weight: float = 0.1  # λ (SGL 0.1, SimGCL 0.1, XSimGCL 0.2 in the authors' configurations)
    tau: float = 0.2  # InfoNCE temperature (XSimGCL: 0.15)
    eps: float = 0.1  # SimGCL / XSimGCL noise magnitude (XSimGCL: 0.2)
    drop: float = 0.1  # SGL's edge dropout rate
    layer: int = 1  # XSimGCL's l*, the layer contrasted with the final representation

    def __post_init__(self) -> None:
        check_choice("contrast.kind", self.kind, KINDS)
        check_positive("contrast.weight", self.weight, allow_zero=True)
        check_positive("contrast.tau", self.tau)
        check_positive("contrast.eps", self.eps, allow_zero=True)
        check_fraction("contrast.drop", self.drop, closed_low=True, closed_high=False)
        check(self.layer >= 1, "contrast.layer", self.layer, "an integer >= 1")


# One config per option (conf/method/<option>.yaml; fedrun/method/<option>.py says which it is).


@dataclass
class CentralConfig:
    """The settings of central training (each centrally trained option's config is, or extends, these)."""

    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("adam", 1e-3))
    batch_size: int = 1024
    num_negatives: int = 1  # negatives per positive, resampled each epoch (ignored for mse and ce)
    sequence_batch: int = 256  # users per mini-batch for sequential backbones
    contrast: ContrastConfig = field(default_factory=ContrastConfig)  # graph backbones: SGL / SimGCL / XSimGCL

    def __post_init__(self) -> None:
        check(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        check(self.sequence_batch >= 1, "sequence_batch", self.sequence_batch, "an integer >= 1")
        check(self.num_negatives >= 0, "num_negatives", self.num_negatives, "an integer >= 0")


@dataclass
class PopConfig:
    pass


@dataclass
class FedAvgConfig(LocalTrainingConfig):
    """FedAvg's settings are its local training's (``LocalTrainingConfig``), at FedAvg's defaults."""


@dataclass
class FedCLConfig(RetrievalConfig):
    """FedCL's settings: the family's, at the paper's values (§4.1)."""


@dataclass
class BILConfig(RetrievalConfig):
    local_negatives: int = 0  # positives only
    semi_hard: int = 0
    similarity: str = "auto"  # auto (cosine for inner-product backbones) | cosine | score
    positive_loss: str = "hinge"  # hinge: max(0, margin − s)² | logistic: −log σ(s)
    margin: float = 0.9  # m of the hinge (Ning et al.'s code: 0.9)
    spread_weight: float = 1.0  # λ of the spread-out regulariser S(V)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("similarity", self.similarity, ("auto", "cosine", "score"))
        check_choice("positive_loss", self.positive_loss, ("hinge", "logistic"))
        check_positive("margin", self.margin)
        check_positive("spread_weight", self.spread_weight, allow_zero=True)


@dataclass
class FCFConfig:
    alpha: float = 1.0  # confidence c_ui = 1 + α r_ui (Hu et al. 2008; open for rating data)
    server_optimizer: ServerOptimizerConfig = field(default_factory=lambda: ServerOptimizerConfig("adam", 0.03))

    def __post_init__(self) -> None:
        check_positive("alpha", self.alpha, allow_zero=True)


@dataclass
class CL4FedRecConfig(ContrastiveConfig):
    """CL4FedRec's settings: the family's, at the paper's values (§5.1, §5.4)."""


@dataclass
class RCL4FedRecConfig(ContrastiveConfig):
    regularizer: bool = True  # false: Table 4's "− regularizer" (= CL4FedRec)
    hot_items: int = 100  # "the top 100 items that have the most number of interactions"
    reg_sample: int = 0  # |V_sp| normal items per epoch (0: all of them)
    reg_steps: int = 10
    reg_lr: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.hot_items >= 1, "hot_items", self.hot_items, "an integer >= 1")
        check(self.reg_sample >= 0, "reg_sample", self.reg_sample, "an integer >= 0 (0: every normal item)")
        check(self.reg_steps >= 1, "reg_steps", self.reg_steps, "an integer >= 1")
        check_positive("reg_lr", self.reg_lr)


@dataclass
class SimGCLConfig(ContrastiveConfig):
    user_cl: str = "none"
    item_cl: str = "noise"


@dataclass
class UnionConfig(ContrastiveConfig):
    user_cl: str = "none"
    item_cl: str = "union"
    item_views: ClassVar[tuple[str, ...]] = ("union", "none")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.num_negatives >= 1, "num_negatives", self.num_negatives,
              "an integer >= 1 (UNION's negative items are the client's sampled negatives)")


@dataclass
class PerFedRecConfig(PersonalizedConfig):
    """PerFedRec's settings: the family's (the authors' code's values where the paper is open)."""


@dataclass
class PretrainOptimizer(ClientOptimizer):
    config_field: ClassVar[str] = "pretrain_optimizer"


@dataclass
class PerFedRecPPConfig(PersonalizedConfig):
    pretrain_rounds: int = 10  # the paper's pre-training epochs (Fig. 6: 1, 3, 5, 10; one round each in the code)
    pretrain_optimizer: PretrainOptimizer = field(default_factory=lambda: PretrainOptimizer("adam", 0.05))  # the code's
    tau: float = 0.2  # InfoNCE temperature (the code)
    user_negatives: int = 256  # users whose shared rows the server sends as negatives (the code: 256 random users)
    view_noise: float = 0.1  # norm of the noise added to each layer of a view (Eq. 3: 1; SimGCL: 0.1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.pretrain_rounds >= 0, "pretrain_rounds", self.pretrain_rounds, "an integer >= 0")
        check_positive("tau", self.tau)
        check(self.user_negatives >= 0, "user_negatives", self.user_negatives,
              "an integer >= 0 (0: the client's neighbours are its negatives)")
        check_positive("view_noise", self.view_noise, allow_zero=True)


@dataclass
class FedGNNConfig(PairPerturbationConfig, LocalTrainingConfig):
    """FedAvg's local training (``fedrun.method._training``) and the pseudo items (``fedrun.method._pseudo``), which
    the default client program (``fedrun.method.client``) runs: FedGNN's client is FedAvg's with them."""


@dataclass
class FedRecConfig(RatingConfig):
    """FedRec's settings are its rating step's (``fedrun.method._rating``)."""


@dataclass
class FedRecPPConfig(RatingConfig):
    denoisers: str = "1"  # η: a number of clients, or a share of them written n/k (n/4, n/2)


@dataclass
class FedMFConfig(RatingConfig):
    lr: float = 0.01  # γ (Chai et al. give none for these datasets; chosen on FilmTrust validation)
    lr_decay: float = 1.0  # constant γ
    mode: str = "part"  # part (PartText: rated items only) | full (FullText: every item, zeros unrated)
    encryption: str = "plaintext"  # plaintext (same sums, cost measured) | paillier (real, small data) | none
    key_length: int = 1024  # l, bits of the Paillier modulus [LightFR Table 4]

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.rho == 0, "rho", self.rho, "0: FedMF fills no virtual ratings (hybrid filling is method=fedrec)")
        check_choice("mode", self.mode, ("part", "full"))
        check_choice("encryption", self.encryption, ("plaintext", "paillier", "none"))
        check(self.key_length >= 128 and self.key_length % 8 == 0, "key_length", self.key_length,
              "a multiple of 8 of at least 128 bits (FedMF: 1024)")


@dataclass
class MetaMFConfig:
    item_factors: int = 8  # s, rank of the rise-dimensional generation [LightFR Table 4]
    user_dim: int = 32  # user embedding e_u (MetaMF code default)
    memory: int = 128  # collaborative vector c_u (MetaMF code default)
    hidden: int = 512  # generator hidden units (MetaMF code default)
    server_optimizer: ServerOptimizerConfig = field(default_factory=lambda: ServerOptimizerConfig("adam", 1e-3))
    chunk_rows: int = 4096  # A_u rows generated at once (memory: chunk_rows · s · hidden floats)

    def __post_init__(self) -> None:
        for name in ("item_factors", "user_dim", "memory", "hidden", "chunk_rows"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")


@dataclass
class PrivRecConfig:
    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("sgd", 0.3))  # Reptile inner loop
    local_steps: int = 5  # k inner steps, in training and in each client's adaptation before ranking
    server_lr: float = 1.0  # β, Reptile's outer step
    clip: float = 50.0  # S: bound on the L2 norm of one client's whole update [LightFR Table 4]
    noise: float = 1.0  # z: Gaussian noise σ = zS on the sum of the round's updates [Table 4]; 0 = no DP
    delta: float = 1e-5  # δ of the (ε, δ) the run reports (accounting only; the paper states none)

    def __post_init__(self) -> None:
        check(self.local_steps >= 1, "local_steps", self.local_steps, "an integer >= 1")
        check_positive("server_lr", self.server_lr)
        check_positive("clip", self.clip)
        check_positive("noise", self.noise, allow_zero=True)
        check(0 < self.delta < 1, "delta", self.delta, "a probability in (0, 1)")


@dataclass
class LightFRConfig:
    balance: float = 0.6  # λ, the balance-constraint trade-off [§4.1.4: 0.6]
    aggregation: str = "grad"  # grad (Agg_grad, Eq. 16) | para (Agg_para, Eq. 17)
    rule: str = "code"  # code (the authors' public code) | paper (Eq. 9, 12, 16 as printed)
    max_sweeps: int = 10  # DCD sweeps over the f bits until no bit changes, at most this many
    item_stay: str = "clients"  # rule=code, grad: the server's stay term c·d_ik (the code) | 2λ|Ω_i^s|·d_ik
    targets: str = "code"  # code: int(R), only R > 0 trains (the authors' code) | scaled: every rating, R = f(2r − 1)
    stay_count: str = "rated"  # |Ω_u| of the user stay term 2λ|Ω_u|·b_uk: rated (every training rating) | trained
    cold_users: float = 0.0  # fraction of clients never trained; they learn codes by Eq. 19 before ranking
    cold_items: float = 0.0  # fraction of rated items withheld from training; coded by Eq. 21 before ranking

    def __post_init__(self) -> None:
        check_positive("balance", self.balance, allow_zero=True)
        check_choice("aggregation", self.aggregation, ("grad", "para"))
        check_choice("rule", self.rule, ("code", "paper"))
        check(self.max_sweeps >= 1, "max_sweeps", self.max_sweeps, "an integer >= 1")
        check_choice("item_stay", self.item_stay, ("clients", "raters"))
        check_choice("targets", self.targets, ("scaled", "code"))
        check_choice("stay_count", self.stay_count, ("rated", "trained"))
        check(self.item_stay == "clients" or (self.rule == "code" and self.aggregation == "grad"), "item_stay",
              self.item_stay, "clients unless rule=code and aggregation=grad (the only server rule with a stay term)")
        check_fraction("cold_users", self.cold_users)
        check_fraction("cold_items", self.cold_items)


@dataclass
class MedianQuantizedConfig(CentralConfig):
    cut: str = "median"  # median: each dimension cut at its median (the paper) | zero: at 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("cut", self.cut, ("median", "zero"))
