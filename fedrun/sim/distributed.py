"""One experiment over several processes (issue #64): ``torchrun --nproc_per_node=N -m fedrun ...``.

Every rank holds the whole run — data, model, private rows, the server program — and takes the same steps,
except the one that costs: the client step. Each round the buckets of local problems (``LocalProblem``, built
identically on every rank) are dealt to the ranks by their padded size (``World.owners``: greedy, largest
first, a pure function of the sizes, so every rank computes the same deal); a rank steps its buckets, then every
rank receives every bucket's ``ClientResult`` (``World.gather_results``: ``all_gather_object``, in bucket
order). From there the round goes on as in one process, on every rank alike: the private rows are written
back, the privacy transform draws its noise in the same order, the attack crafts, the defense aggregates, the
server steps. The ranks therefore stay bit-identical replicas, and a run on N ranks is the one-process run of
the same config whenever a bucket's step gives the same bits in either (same shapes, same thread count): the
deal moves buckets, never splits or reorders them.

What it costs: the step is divided by N (up to the largest bucket); every rank receives all uploads and new
private rows of the round (the all-gather), and the rest of the round and the evaluation run on every rank.
So the robust rules, which need every uploader of a row, cost no extra communication; a linear rule would need
only a reduce of the row sums, which a later step can use.

Only rank 0 tracks (the others get ``NoTracking``) and writes checkpoints and outputs. A checkpoint holds the
replicated state, so a run resumes on any number of ranks. The backend is gloo on CPU and NCCL on CUDA, each
rank on ``cuda:<LOCAL_RANK>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedrun.core.world import SINGLE, World, rank_device, world_from_env
from fedrun.errors import ConfigError
from fedrun.track.base import Tracker

__all__ = ["SINGLE", "Follower", "World", "check_shardable", "rank_device", "world_from_env"]


def check_shardable(method: Any, world: World, per_round: int) -> None:
    """A sharded run's method steps its clients without keeping anything beside the result (its client program's
    ``unshardable`` is None) and its rounds have a client for every rank."""
    reason = method.client.unshardable
    if reason is not None:
        raise ConfigError("WORLD_SIZE", world.size, f"1 (one process): {type(method).__name__} cannot deal its client "
                          f"steps over ranks: {reason}")
    if per_round < world.size:
        raise ConfigError("WORLD_SIZE", world.size, f"at most the {per_round} clients of a round "
                          "(sim.clients_per_round): each rank steps at least one client")


class Follower(Tracker):
    """The tracker of a rank other than 0: records nothing, but finds a checkpoint by run id as rank 0 does."""

    Config = type(None)

    def __init__(self, leader: Tracker):
        super().__init__(leader.config)
        self.leader = leader

    def fetch_checkpoint(self, run_id: str) -> Path:
        return self.leader.fetch_checkpoint(run_id)
