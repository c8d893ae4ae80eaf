"""The ``privacy`` group's settings (``privacy=ldp`` → ``LDPConfig``). Torch-free at import:
``fedrun.app.preflight`` refuses a bad value before torch loads. The mechanisms are in
``fedrun/privacy/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.errors import check, check_choice, check_positive

TARGETS = ("user_embedding", "item_rows")
NORMS = ("l1", "l2", "linf")


@dataclass
class LDPConfig:
    epsilon: float = 4.0  # privacy budget of one upload (FedCL: ε = 4)
    clip: float = 1.0  # δ, the clipping threshold (FedCL: 1)
    norm: str = "l1"  # l1 | l2 | linf: the norm clipped (FedCL: L1)
    mechanism: str = "laplace"  # laplace | gaussian
    delta: float = 1e-5  # δ_dp of the Gaussian mechanism
    targets: list[str] = field(default_factory=lambda: ["user_embedding"])  # user_embedding | item_rows
    scale: float | None = None  # Laplace λ (or Gaussian σ) per coordinate, set directly (ε is then derived)

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_positive("clip", self.clip)
        check_choice("norm", self.norm, NORMS)
        check_choice("mechanism", self.mechanism, ("laplace", "gaussian"))
        check(0 < self.delta < 1, "delta", self.delta, "a number in (0, 1)")
        check(len(self.targets) >= 1 and all(t in TARGETS for t in self.targets), "targets", list(self.targets),
              f"a non-empty list of {', '.join(TARGETS)}")
        if self.scale is not None:
            check_positive("scale", self.scale)
            check(self.mechanism == "laplace", "scale", self.scale,
                  "null with mechanism=gaussian (set epsilon and delta instead)")


@dataclass
class NoPrivacyConfig:
    pass
