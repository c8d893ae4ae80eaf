"""Probabilistic matrix factorisation for explicit ratings (Salakhutdinov & Mnih, NIPS 2007).

r̂_ui = ⟨U_u, V_i⟩, squared loss on observed ratings (Eq. 1 of FedRec++ without the
virtual ratings); L2 regularisation is the method's ``l2`` (α in FedRec/FedRec++).
Private: U_u. Public: V_i.
"""

from __future__ import annotations

from fedrun.backbone.config import BackboneConfig
from fedrun.backbone.mf import MF


class PMF(MF):
    Config = BackboneConfig
    losses = ("mse",)
