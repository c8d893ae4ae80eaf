"""The ``attack`` group's settings, one dataclass per option (``attack=a_hum`` → ``AHumConfig``), each with the
defaults of its paper's code. Torch-free at import: ``fedrun.app.preflight`` refuses a bad value before torch
loads. The attacks themselves are in ``fedrun/attack/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.errors import check, check_choice, check_positive, check_seed

PARTICIPATION = ("per_epoch", "sampled", "every_round")  # how malicious clients join rounds (``Attack.joining``)


@dataclass
class AttackConfig:
    fraction: float = 0.001  # malicious clients per benign user (A-hum code: int(n_users × fraction), ≥ 1)
    targets: str = "least_popular"  # least_popular (over train + test) | random (target_seed) | explicit
    n_targets: int = 1  # how many target items (least_popular, random)
    target_ids: list[int] = field(default_factory=list)  # targets=explicit: the item ids
    target_seed: int = 0  # targets=random: its own seed (not the data's, not the training's)
    # per_epoch: each malicious client joins once per epoch, shuffled with the benign clients (the A-hum and
    # FedRecAttack code) | sampled: each round with a benign client's odds | every_round: a stress setting, every
    # malicious client at every server step (rounds-per-epoch times the reference code's pressure)
    participation: str = "per_epoch"
    lr: float | None = None  # step of a malicious upload (−lr × gradient); null: the method's client lr

    def __post_init__(self) -> None:
        check(0 < self.fraction < 1, "fraction", self.fraction, "a number in (0, 1) of malicious clients per user")
        check_choice("targets", self.targets, ("least_popular", "random", "explicit"))
        check(self.n_targets >= 1, "n_targets", self.n_targets, "an integer >= 1")
        check_seed("target_seed", self.target_seed)
        check(self.targets != "explicit" or len(self.target_ids) >= 1, "target_ids", self.target_ids,
              "a non-empty list of item ids with targets=explicit")
        check(self.targets == "explicit" or not self.target_ids, "target_ids", list(self.target_ids),
              f"[] with targets={self.targets} (set targets=explicit to attack these items)")
        check(len(set(self.target_ids)) == len(self.target_ids), "target_ids", list(self.target_ids),
              "distinct item ids (a repeated target is counted twice in ER@K)")
        check_choice("participation", self.participation, PARTICIPATION)
        check(self.lr is None or self.lr > 0, "lr", self.lr, "a number > 0 or null")


@dataclass
class NoAttackConfig:
    pass


@dataclass
class EBConfig(AttackConfig):
    pass


@dataclass
class RAConfig(AttackConfig):
    items_limit: int = 30  # positives per malicious client: the targets and random fillers

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.items_limit >= 1, "items_limit", self.items_limit, "an integer >= 1")


SYNTHETIC_DRAWS = ("per_upload", "once")


@dataclass
class ARAConfig(AttackConfig):
    synthetic_users: int = 10  # s per malicious client
    init_std: float = 0.01  # σ of the synthetic users' embeddings
    synthetic_draw: str = "per_upload"  # per_upload (the code: fresh users for every upload) | once (kept)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.synthetic_users >= 1, "synthetic_users", self.synthetic_users, "an integer >= 1")
        check_positive("init_std", self.init_std)
        check_choice("synthetic_draw", self.synthetic_draw, SYNTHETIC_DRAWS)


@dataclass
class AHumConfig(ARAConfig):
    mining_steps: int = 30  # gradient steps that make each synthetic user dislike the targets
    mining_lr: float | None = 0.001  # the code's model lr; null: the upload's lr

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.mining_steps >= 0, "mining_steps", self.mining_steps, "an integer >= 0")
        check(self.mining_lr is None or self.mining_lr > 0, "mining_lr", self.mining_lr, "a number > 0 or null")


@dataclass
class PSMUConfig(ARAConfig):
    profile_size: int = 30  # items in a synthetic user's random profile
    fit_steps: int = 30  # gradient steps fitting the users to their profiles, each round
    fit_lr: float | None = 0.001  # their step (null: the upload's lr)
    n_alternatives: int = 10  # the target's competitors per synthetic user (its top-scored items)
    synthetic_draw: str = "once"  # PSMU keeps its users and refits them each round to their profiles

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.synthetic_draw == "once", "synthetic_draw", self.synthetic_draw,
              "once: PSMU's users are drawn once and refitted to their profiles every round")
        check(self.profile_size >= 1, "profile_size", self.profile_size, "an integer >= 1")
        check(self.fit_steps >= 0, "fit_steps", self.fit_steps, "an integer >= 0")
        check(self.fit_lr is None or self.fit_lr > 0, "fit_lr", self.fit_lr, "a number > 0 or null")
        check(self.n_alternatives >= 1, "n_alternatives", self.n_alternatives, "an integer >= 1")


@dataclass
class FedRecAttackConfig(AttackConfig):
    fraction: float = 0.05  # the code's clients_limit
    targets: str = "random"  # the code: one random item
    known_fraction: float = 0.01  # share of the training interactions the attacker knows (part_percent 1 %)
    known_seed: int = 0  # draws the known interactions (fixed across training seeds, like the code's file)
    items_limit: int = 60  # rows a malicious client uploads (targets + items drawn ∝ ‖G_i‖)
    grad_limit: float = 1.0  # L2 bound of an uploaded row's gradient (the server's limit)
    noise_var: float = 1e-7  # variance of the Gaussian noise on every uploaded row
    attack_lr: float = 0.01  # Adam step of the approximated users
    attack_batch_size: int = 256  # approximated users per Adam step
    top_k: int = 10  # the list a target must enter
    init_std: float = 0.01  # σ of the approximated users' initial embeddings

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.known_fraction <= 1, "known_fraction", self.known_fraction, "a share in (0, 1]")
        check_seed("known_seed", self.known_seed)
        check(self.items_limit >= 1, "items_limit", self.items_limit, "an integer >= 1")
        check_positive("grad_limit", self.grad_limit)
        check_positive("noise_var", self.noise_var, allow_zero=True)
        check_positive("attack_lr", self.attack_lr)
        check(self.attack_batch_size >= 1, "attack_batch_size", self.attack_batch_size, "an integer >= 1")
        check(self.top_k >= 1, "top_k", self.top_k, "an integer >= 1")
        check_positive("init_std", self.init_std)
