"""The benchmarks' shared settings (the recorded W0 configuration, the data sets) and how they time and
check a workload: building a method as a run does, timing rounds, the per-client loop's round, tables."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fedrun.app.build import build
from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.report.table import markdown
from fedrun.sim.trainer import trainer_for
from fedrun.testing.fedavg_loop import clients_of, fedavg_round
from fedrun.testing.measure import sync

ROOT = Path(__file__).resolve().parents[2]


ML1M_8020 = ["dataset=ml-1m", "dataset.variant=split80-20", "dataset.split.protocol=predefined"]


GOWALLA = ["dataset=gowalla", "dataset.split.protocol=predefined"]


COMMON = ["method=fedavg", "method.optimizer.name=sgd", "method.optimizer.lr=10", "method.optimizer.user_lr=null",
          "method.loss_reduction=mean", "sim.local_epochs=1", "track=none", "sim.progress=false"]  # the recorded W0


MF = ["backbone=mf", "backbone.dim=32", "backbone.loss=bpr", "method.num_negatives=1"]


NCF = ["backbone=ncf", "method.num_negatives=4"]


TINY_DATA = ["dataset=synthetic", "dataset.n_users=300", "dataset.n_items=400", "dataset.mean_length=12"]


@dataclass
class Workload:
    name: str
    title: str
    data: list[str]
    overrides: list[str]
    clients: int
    central: list[str] = field(default_factory=list)  # extra overrides for the central epoch


def reset_peak_rss() -> None:
    """Linux: reset this process's high-water mark (VmHWM) so a later peak is this step's own;
    likewise the CUDA allocator's peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_gpu_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def memory_note(device: torch.device) -> str:
    peak = peak_gpu_gb(device)
    return "" if peak is None else f"; peak GPU memory allocated {peak:.2f} GB"


def build_method(overrides: list[str]):
    """The method's rounds (``.method`` the method) as a run drives them, and the run's env."""
    cfg = compose(overrides)
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env)
    return trainer_for(method, p.privacy, p.attack, p.defense, p.sim), env


def time_rounds(trainer, rounds: int, warmup: int = 2) -> float:
    for r in range(warmup):
        trainer.train_round(r)
    sync(trainer.method.env.device)
    started = time.perf_counter()
    for r in range(warmup, warmup + rounds):
        trainer.train_round(r)
    sync(trainer.method.env.device)
    return (time.perf_counter() - started) / rounds


def loop_round(trainer, env, round_index: int):
    """One round of the deepcopy loop from the method's current state: (seconds, new public)."""
    method = trainer.method
    user_table, public = method.client.private.user.clone(), method.public.clone()
    clients = clients_of(method.client.problems(trainer.sampler.users(round_index), round_index))  # not timed
    sync(env.device)
    started = time.perf_counter()
    fedavg_round(env.backbone, user_table, public, clients, method.config.optimizer, env.sim.local_epochs,
                 reduction=method.config.loss_reduction)
    sync(env.device)
    return time.perf_counter() - started, public


def check_loop_agrees(general, env, round_index: int) -> float:
    """The loop and the general path start from one state and must end at the same item table."""
    _, public = loop_round(general, env, round_index)
    general.train_round(round_index)
    return float((public.item - general.method.public.item).abs().max())


def write_table(out: Path, name: str, header: list[str], rows: list[list[str]], caption: str) -> str:
    table = markdown(header, rows)
    text = f"{caption}\n\n{table}\n"
    (out / f"{name}.md").write_text(text)
    csv = "\n".join(",".join(c.replace(",", "") for c in row) for row in [header, *rows]) + "\n"
    (out / f"{name}.csv").write_text(csv)
    return text


def build_and_run(overrides: list[str], rounds: int) -> torch.Tensor:
    """The item table after ``rounds`` bucketed rounds from the seed (what the loop must match)."""
    trainer, _ = build_method(overrides)
    for r in range(rounds):
        trainer.train_round(r)
    return trainer.method.public.item


def without_workloads(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workloads":
            skip = True
        elif not arg.startswith("--workloads="):
            kept.append(arg)
    return kept
