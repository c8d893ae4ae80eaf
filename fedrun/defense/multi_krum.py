"""Multi-Krum per item row (Blanchard et al., NeurIPS 2017 §4): score every upload of a row as Krum
does (``fedrun.defense.krum``) and average the m lowest-scored (m capped at the row's uploads).
m = 1 is Krum; m = c is the plain mean. Rows of one or two uploads, ties, dense weights and
``reduce`` as for Krum."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.defense.krum import Krum, KrumConfig
from fedrun.errors import check


@dataclass
class MultiKrumConfig(KrumConfig):
    m: int = 5  # uploads averaged per row after scoring

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.m >= 1, "m", self.m, "an integer >= 1")


class MultiKrum(Krum):
    Config = MultiKrumConfig

    def check_participants(self, n_clients: int) -> None:
        super().check_participants(n_clients)
        check(self.config.m < n_clients, "defense.m", self.config.m,
              f"fewer than the round's {n_clients} clients: averaging m >= a row's uploaders keeps them all, the "
              "plain mean")

    @property
    def selected(self) -> int:  # type: ignore[override]
        return self.config.m
