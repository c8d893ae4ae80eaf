"""Benchmark the vectorized simulator against the per-client loop and a centralized epoch.

W0 (issue #7): FedAvg-MF, BPR, dim 32, 1 negative per positive resampled each round, one
local SGD step, 256 clients per round, ml-1m ``split80-20``. Measured in one run, same
data and hyperparameters:
  - fast:    fedrun's round with the FedSGD fast path (the default for this workload)
  - general: fedrun's round with per-client copies (``sim.fast_path=off``)
  - loop:    the plain per-client loop with a deepcopy of the model per client (tests/oracle)
  - central: one centralized epoch over the same interactions (batch 1024, same lr)
Writes a Markdown + CSV table to ``outputs/bench/`` and prints it.

    python scripts/bench.py [--rounds 20] [--loop-rounds 3] [--dataset-override ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedrun.build import build  # noqa: E402
from fedrun.eval.base import Evaluator  # noqa: E402
from fedrun.experiment import plan  # noqa: E402
from fedrun.method.base import Method  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.sim.env import RunEnv  # noqa: E402
from tests.conftest import compose_cfg  # noqa: E402  (the same config composition the tests use)
from tests.oracle.fedavg_loop import fedavg_round  # noqa: E402
from tests.test_oracle import clients_of  # noqa: E402

W0 = ["dataset=ml-1m", "dataset.variant=split80-20", "dataset.split.protocol=predefined", "backbone=mf",
      "backbone.dim=32", "backbone.loss=bpr", "method.num_negatives=1", "method.optimizer.name=sgd",
      "method.optimizer.lr=10", "sim.clients_per_round=256", "sim.local_epochs=1", "track=none"]


def build_method(overrides):
    cfg = compose_cfg(overrides)
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    return build(cfg.method, "method", Method, env=env, privacy=p.privacy, attack=p.attack, defense=p.defense), env


def time_rounds(method, rounds, warmup=2):
    for r in range(warmup):
        method.train_round(r)
    started = time.perf_counter()
    for r in range(warmup, warmup + rounds):
        method.train_round(r)
    return (time.perf_counter() - started) / rounds


def time_loop(method, env, rounds):
    user_table, public = method.private.user.clone(), method.public.clone()
    total = 0.0
    for r in range(rounds):
        clients = clients_of(method.problems(method.sampler.users(r), r))  # data prep not timed
        started = time.perf_counter()
        fedavg_round(env.backbone, user_table, public, clients, method.config.optimizer, env.sim.local_epochs)
        total += time.perf_counter() - started
    return total / rounds


W4_DATA = {"ml-1m": ["dataset=ml-1m"],
           "gowalla": ["dataset=gowalla", "dataset.split.protocol=predefined"]}


def bench_w4(name: str) -> list[str]:
    """Full-ranking evaluation of every test user (MF, dim 32) vs the floor: the same users'
    ``scores = U @ Vᵀ`` and ``topk(K_max + 1)`` in the same chunks, nothing else."""
    cfg = compose_cfg(W4_DATA[name] + ["backbone=mf", "method=fedavg", "track=none", "sim.clients_per_round=1"])
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env, privacy=p.privacy, attack=p.attack, defense=p.defense)
    evaluator = build(cfg.eval, "eval", Evaluator, split=env.split, device=env.device, rating=False)
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    chunk = evaluator.chunk_users(env.n_items)
    k = max(evaluator.config.ks) + 1
    started = time.perf_counter()
    evaluator.evaluate(method, "test")
    t_eval = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():
        for part in torch.split(users, chunk):
            (method.private.user[part] @ method.public.item.T).topk(k, dim=1)
    t_floor = time.perf_counter() - started
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return [name, f"{users.numel():,}", f"{env.n_items:,}", f"{t_eval:.2f}", f"{t_floor:.2f}",
            f"{t_eval / t_floor:.2f}×", f"{rss_gb:.2f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--loop-rounds", type=int, default=3)
    parser.add_argument("--out", default="outputs/bench")
    parser.add_argument("--workloads", default="w0,w4", help="comma-separated: w0, w4")
    args = parser.parse_args()
    os.environ.setdefault("FEDRUN_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workloads = set(args.workloads.split(","))
    if "w0" in workloads:
        print(bench_w0(args, out))
    if "w4" in workloads:
        header = ["W4 dataset", "users", "items", "eval s", "floor s", "eval / floor", "peak RSS GB (process)"]
        table = markdown(header, [bench_w4(name) for name in W4_DATA])
        (out / "w4.md").write_text(table + "\n")
        print(f"W4 full-ranking evaluation (MF dim 32, eval.memory_mb=256, K = 5, 10, 20)\n\n{table}\n")
    return 0


def bench_w0(args, out: Path) -> str:
    fast, env = build_method(W0)
    general, _ = build_method(W0 + ["sim.fast_path=off"])
    central, _ = build_method(W0 + ["method=central", "method.optimizer.name=sgd", "method.optimizer.lr=0.05",
                                    "method.batch_size=1024", "method.num_negatives=1"])
    clients = fast.sampler.per_round
    per_epoch = fast.rounds_per_epoch()
    t_fast = time_rounds(fast, args.rounds)
    t_general = time_rounds(general, args.rounds)
    t_loop = time_loop(general, env, args.loop_rounds)
    started = time.perf_counter()
    central.train_round(0)
    t_central = time.perf_counter() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = []
    for name, seconds in (("fast (FedSGD)", t_fast), ("general (copies)", t_general), ("loop (deepcopy)", t_loop)):
        rows.append([name, f"{seconds:.4f}", f"{clients / seconds:,.0f}", f"{t_loop / seconds:.1f}×",
                     f"{seconds * per_epoch:.2f}", f"{seconds * per_epoch / t_central:.2f}×"])
    rows.append(["central epoch", "", "", "", f"{t_central:.2f}", "1.00×"])
    header = ["W0 path", "s / round", "client updates / s", "vs loop", "s / epoch", "epoch vs central"]
    table = markdown(header, rows)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    text = (f"W0 FedAvg-MF on ml-1m split80-20, {clients} clients/round, {per_epoch} rounds/epoch; "
            f"{machine}; peak RSS {rss_mb:.0f} MB\n\n{table}\n")
    (out / "w0.md").write_text(text)
    (out / "w0.csv").write_text("\n".join(",".join(c.replace(",", "") for c in r) for r in [header, *rows]) + "\n")
    return text


if __name__ == "__main__":
    sys.exit(main())
