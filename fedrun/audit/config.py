"""The ``audit`` group's settings (``audit=server`` → ``ServerAuditConfig``). Torch-free at import:
``fedrun.app.preflight`` refuses a bad value before torch loads. The audits are in ``fedrun/audit/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.errors import check, check_choice

ATTACKS = ("rated_set", "shared", "ratings", "membership")


@dataclass
class ServerAuditConfig:
    attacks: list[str] = field(default_factory=lambda: list(ATTACKS))  # which of the attacks run
    k: int = 20  # the shared-vector guess: the top K items

    def __post_init__(self) -> None:
        for name in self.attacks:
            check_choice("audit.attacks", name, ATTACKS)
        check(self.k >= 1, "audit.k", self.k, "an integer >= 1")


@dataclass
class NoAuditConfig:
    pass
