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

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from fedrun.errors import ConfigError
from fedrun.track.base import Tracker


@dataclass(frozen=True)
class World:
    """A process's place among the run's processes (one process: ``SINGLE``)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def sharded(self) -> bool:
        return self.size > 1

    @property
    def leads(self) -> bool:
        """Whether this rank tracks, checkpoints and prints (rank 0)."""
        return self.rank == 0

    def owners(self, sizes: Sequence[int]) -> list[int]:
        """The rank that steps each bucket: largest first, each to the least loaded rank (ties: lowest rank)."""
        load = [0] * self.size
        owner = [0] * len(sizes)
        for bucket in sorted(range(len(sizes)), key=lambda b: (-sizes[b], b)):
            rank = min(range(self.size), key=lambda r: (load[r], r))
            owner[bucket] = rank
            load[rank] += sizes[bucket]
        return owner

    def gather_results(self, mine: dict[int, Any], n_buckets: int, device: torch.device) -> list[Any]:
        """Every bucket's result on every rank, in bucket order, on ``device``, from each rank's
        ``{bucket: result}`` (pickled through the CPU: ``all_gather_object``)."""
        if not self.sharded:
            return [mine[b] for b in range(n_buckets)]
        import torch.distributed as dist

        shares: list[dict[int, Any] | None] = [None] * self.size
        dist.all_gather_object(shares, {b: map_tensors(result, lambda t: t.cpu()) for b, result in mine.items()})
        merged = {b: result for share in shares for b, result in (share or {}).items()}
        return [map_tensors(merged[b], lambda t: t.to(device)) for b in range(n_buckets)]


SINGLE = World()


def map_tensors(value: Any, function) -> Any:
    import dataclasses

    if isinstance(value, torch.Tensor):
        return function(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: map_tensors(getattr(value, f.name), function)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
        return {k: map_tensors(v, function) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, function) for v in value)
    return value


def check_shardable(method: Any, world: World, per_round: int) -> None:
    """A sharded run's method steps its clients without keeping anything beside the result (its client program's
    ``shards`` capability) and its rounds have a client for every rank."""
    reason = method.client.unshardable
    if reason is not None:
        raise ConfigError("WORLD_SIZE", world.size, f"1 (one process): {type(method).__name__} cannot deal its client "
                          f"steps over ranks: {reason}")
    if per_round < world.size:
        raise ConfigError("WORLD_SIZE", world.size, f"at most the {per_round} clients of a round "
                          "(sim.clients_per_round): each rank steps at least one client")


def world_from_env(device: str) -> World:
    """The world ``torchrun`` describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``), its process group joined;
    ``SINGLE`` without it. ``device``: ``sim.device``, which picks the backend (NCCL on CUDA, gloo on CPU)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return SINGLE
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda and torch.cuda.device_count() <= world.local_rank:
            raise ConfigError("sim.device", device, f"cpu: NCCL needs a GPU per rank on a node, and local rank "
                              f"{world.local_rank} has none ({torch.cuda.device_count()} GPU(s) here)")
        if cuda:
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group("nccl" if cuda else "gloo")
    return world


def rank_device(device: str, world: World) -> str:
    """``sim.device`` for this rank: its own GPU (``cuda:<LOCAL_RANK>``) when the run is sharded on CUDA."""
    if world.sharded and (device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())):
        return f"cuda:{world.local_rank}"
    return device


class Follower(Tracker):
    """The tracker of a rank other than 0: records nothing, but finds a checkpoint by run id as rank 0 does."""

    Config = type(None)

    def __init__(self, leader: Tracker):
        super().__init__(leader.config)
        self.leader = leader

    def fetch_checkpoint(self, run_id: str) -> Path:
        return self.leader.fetch_checkpoint(run_id)
