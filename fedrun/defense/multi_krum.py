"""Multi-Krum per item row (Blanchard et al., NeurIPS 2017 §4): score every upload of a row as Krum
does (``fedrun.defense.krum``) and average the m lowest-scored (m capped at the row's uploads).
m = 1 is Krum; m = c is the plain mean. Rows of one or two uploads, ties, dense weights and
``reduce`` as for Krum."""

from __future__ import annotations

from fedrun.defense.config import MultiKrumConfig
from fedrun.defense.krum import Krum
from fedrun.errors import check


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
