"""A process's place among the processes of one run (``torchrun``: ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``), and
the two collectives a sharded run needs: every rank's share of a list of results, in order (``gather_results``).
What is dealt and why it gives the one-process numbers: ``fedrun.sim.distributed``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from fedrun.errors import ConfigError


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
        dist.all_gather_object(shares, {b: map_tensors(result, lambda t: own_storage(t.cpu()))
                                        for b, result in mine.items()})
        merged = {b: result for share in shares for b, result in (share or {}).items()}
        return [map_tensors(merged[b], lambda t: t.to(device)) for b in range(n_buckets)]


SINGLE = World()


def own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or a copy where it is a view into a larger buffer: pickling a view sends its whole storage
    (a bucket's upload rows are a slice of the round's buffer, ``fedrun.kernels.batching.local_problems``)."""
    if tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size():
        return tensor.clone()
    return tensor


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
