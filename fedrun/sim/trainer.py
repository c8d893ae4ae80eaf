"""What the run loop drives: a method's rounds. A federated method trains through the federated
round (``round.py``); a method without clients (``central``, ``pop``, SVD++, ...) trains in its own
centralized steps and has no round, privacy, attack or defense (``fedrun.app.build`` refuses them)."""

from __future__ import annotations

from fedrun.attack.base import Attack
from fedrun.defense.base import Defense
from fedrun.errors import ConfigError
from fedrun.kernels.config import SimConfig
from fedrun.method.base import Method, RoundStats
from fedrun.method.federated import FederatedMethod
from fedrun.privacy.base import Privacy
from fedrun.sim.distributed import SINGLE, World
from fedrun.sim.round import FederatedRound


class CentralTraining:
    """A centralized method's own training steps, one "round" each (an epoch or a batch sweep)."""

    def __init__(self, method: Method):
        self.method = method

    def rounds_per_epoch(self) -> int:
        return self.method.rounds_per_epoch()

    def train_round(self, round_index: int) -> RoundStats:
        return self.method.train_round(round_index)

    def describe(self) -> dict:
        return {}


Trainer = FederatedRound | CentralTraining


def trainer_for(method: Method, privacy: Privacy, attack: Attack, defense: Defense, sim: SimConfig,
                world: World = SINGLE) -> Trainer:
    if isinstance(method, FederatedMethod):
        return FederatedRound(method, privacy, attack, defense, sim, world)
    if world.sharded:
        raise ConfigError("WORLD_SIZE", world.size, f"1 (one process): {type(method).__name__} trains centrally; "
                          "only federated rounds are dealt over ranks")
    return CentralTraining(method)
