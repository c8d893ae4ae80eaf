"""The ``sim`` group (rounds, clients per round, seeds, device, batching limits) and the optimizers' settings the
methods share. Torch-free at import, as every option's config is: a refused value is answered before torch
loads (``fedrun.app.preflight``); torch is imported where a device or an optimizer is built.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

from fedrun.errors import ConfigError, check, check_choice, check_positive, check_seed

if TYPE_CHECKING:
    import torch

DEFAULT_MAX_SLOTS = 1 << 21


@dataclass
class SimConfig:
    seed: int = 0  # training seed: initialisation, client sampling, negatives (the split has its own)
    epochs: int = 20  # global epochs; a federated epoch = every client with data sampled once
    clients_per_round: int | float | str = 256  # c, a fraction p in (0, 1.0] of the clients, or "all"
    sampling: str = "epoch"  # epoch: a permutation dealt per epoch | independent: c fresh clients every round
    local_epochs: int = 1  # local full-batch steps per round
    max_rounds: int | None = None  # stop after this many rounds (0: evaluate the initial model)
    eval_every: int = 1  # validate every N epochs (0: only the final test)
    test_every: int = 0  # also test every N epochs, for learning curves (never used to select; 0: only at the end)
    patience: int | None = None  # stop after this many validations without a better eval.monitor (null: never)
    keep_best: bool = False  # test the model of the best validation eval.monitor instead of the last one
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # client buckets by data size per round: auto (as few as keep each bucket's padded slots at most ``padding``
    # times its real ones) or a fixed count (equal-count buckets, at least ``min_bucket_clients`` clients each)
    buckets: int | str = "auto"
    padding: float = 1.3  # auto buckets: the most padded slots per real one in a bucket
    min_bucket_clients: int = 16  # fixed-count buckets: fewer buckets when a round has few clients
    # most padded (client, example) slots trained at once: bounds memory. At its default it is lowered, said in
    # the log and recorded (run.max_slots), where a full bucket would not fit this machine's memory at the
    # backbone's width; a value set by hand that does not fit is refused
    max_slots: int = DEFAULT_MAX_SLOTS
    fast_path: str = "auto"  # auto: FedSGD fast path when exact | off
    progress: bool = True  # show the progress bar
    threads: int | None = None  # torch CPU threads (null: all cores; cores / n_jobs under a parallel launcher)
    checkpoint_every: int = 100  # rounds between checkpoints (0: only when stopped by a signal)
    resume: str | None = None  # a checkpoint path or an MLflow run id to continue
    checkpoint_dir: str | None = None  # where checkpoint.pt goes (default: the run's Hydra output dir)

    def __post_init__(self) -> None:
        check(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        check_seed("seed", self.seed)
        for name in ("resume", "checkpoint_dir"):
            value = getattr(self, name)
            check(value is None or str(value).strip() != "", name, value, "null or a non-empty path")
        per_round = self.clients_per_round
        check(per_round == "all" or (isinstance(per_round, int) and not isinstance(per_round, bool) and per_round >= 1)
              or (isinstance(per_round, float) and 0 < per_round <= 1),
              "clients_per_round", per_round, "an integer >= 1, a fraction in (0, 1.0] of the clients, or all")
        check(self.local_epochs >= 1, "local_epochs", self.local_epochs, "an integer >= 1")
        check(self.max_rounds is None or self.max_rounds >= 0, "max_rounds", self.max_rounds, "null or an integer >= 0")
        check(self.eval_every >= 0, "eval_every", self.eval_every, "an integer >= 0")
        check(self.test_every >= 0, "test_every", self.test_every, "an integer >= 0")
        check(self.patience is None or self.patience >= 1, "patience", self.patience, "null or an integer >= 1")
        check(self.buckets == "auto" or (isinstance(self.buckets, int) and not isinstance(self.buckets, bool)
                                         and self.buckets >= 1), "buckets", self.buckets, "auto or an integer >= 1")
        check(self.padding >= 1, "padding", self.padding, "a number >= 1 (padded slots per real one)")
        check(self.min_bucket_clients >= 1, "min_bucket_clients", self.min_bucket_clients, "an integer >= 1")
        check(self.max_slots >= 1, "max_slots", self.max_slots, "an integer >= 1")
        check_choice("fast_path", self.fast_path, ("auto", "off"))
        check_choice("sampling", self.sampling, ("epoch", "independent"))
        check(self.threads is None or self.threads >= 1, "threads", self.threads, "null or an integer >= 1")
        cores = os.cpu_count() or 1
        check(self.threads is None or self.threads <= cores, "threads", self.threads,
              f"null or at most this machine's {cores} cores (more threads than cores only contend for them)")
        check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "an integer >= 0")
        check(re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None, "device",
              self.device, "auto, cpu, cuda or cuda:N")

    @property
    def selects_on_validation(self) -> bool:
        """Whether validation decides when to stop or which model is tested."""
        return self.patience is not None or self.keep_best

    def round_size(self, n_clients: int) -> int:
        """Clients per round for a dataset with ``n_clients`` clients holding data (a fraction p gives
        round(p·n), at least 1: the float 1.0 is every client, the integer 1 one client)."""
        if self.clients_per_round == "all":
            return n_clients
        if isinstance(self.clients_per_round, float):
            return max(1, round(self.clients_per_round * n_clients))
        return int(self.clients_per_round)

    def torch_device(self) -> torch.device:
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("sim.device", self.device, "cpu or auto: no CUDA device is available here")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError("sim.device", self.device, f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
        return device


@dataclass
class ClientOptimizer:
    name: str = "sgd"  # sgd | adam
    lr: float = 0.05
    momentum: float = 0.0  # sgd only
    weight_decay: float = 0.0  # L2 on the client's local parameters
    user_lr: float | None = None  # the private user rows' lr (null: lr)

    config_field: ClassVar[str] = "optimizer"  # the config field it is (what its errors name)

    def __post_init__(self) -> None:
        field = self.config_field
        check_choice(f"{field}.name", self.name, ("sgd", "adam"))
        check_positive(f"{field}.lr", self.lr)
        check(0 <= self.momentum < 1, f"{field}.momentum", self.momentum, "a number in [0, 1)")
        check_positive(f"{field}.weight_decay", self.weight_decay, allow_zero=True)
        if self.user_lr is not None:
            check_positive(f"{field}.user_lr", self.user_lr)

    @property
    def private_lr(self) -> float:
        """The lr of the private user rows."""
        return self.lr if self.user_lr is None else self.user_lr

    def make(self, params: list[torch.Tensor], private: Sequence[torch.Tensor] = ()) -> torch.optim.Optimizer:
        """The optimizer of ``params`` at ``lr`` and of the ``private`` user rows at ``private_lr``."""
        import torch

        groups = [{"params": list(params)}] + ([{"params": list(private), "lr": self.private_lr}] if private else [])
        if self.name == "adam":
            return torch.optim.Adam(groups, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    @property
    def is_plain_sgd(self) -> bool:
        return self.name == "sgd" and self.momentum == 0 and self.weight_decay == 0


@dataclass
class ServerOptimizerConfig:
    name: str = "sgd"  # sgd | adam
    lr: float = 1.0

    def __post_init__(self) -> None:
        check_choice("server_optimizer.name", self.name, ("sgd", "adam"))
        check_positive("server_optimizer.lr", self.lr)
