"""The centralized row (``method=central``): the backbone trained on all training data in one place, as the
method base of central training does it (``fedrun.method.centralized``: mini-batch epochs over every pair or
every user's sequence; LightGCN with SGL / SimGCL / XSimGCL through ``method.contrast``) — with no terms of
its own, the rows the backbone scores with are its parameters.
"""

from __future__ import annotations

from fedrun.method.centralized import CentralConfig, CentralMethod


class Central(CentralMethod):
    Config = CentralConfig
