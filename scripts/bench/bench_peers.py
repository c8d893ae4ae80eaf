"""Benchmark peers (issue #7): workload W0 through Flower's simulation engine, beside fedrun.

W0 = FedAvg-MF (BPR, dim 32, one negative per positive resampled each round, one local SGD step,
lr 10) on ml-1m split80-20, 256 clients per round. Flower runs one client per user (its legacy
Ray simulation, ``start_simulation``), each client a lean NumPy implementation of the same local
step that returns only its touched item rows; a custom strategy averages each row over the
clients that touched it. Flower lives in its own environment (``make bench-peers`` creates
``.venv-peers``), so the steps run in two interpreters:

    python scripts/bench/bench_peers.py export  --out outputs/bench/peers      # main env: W0's data
    .venv-peers/bin/python scripts/bench/bench_peers.py flower --out outputs/bench/peers
    python scripts/bench/bench_peers.py fedrun  --out outputs/bench/peers      # main env: fedrun's W0
    python scripts/bench/bench_peers.py report  --out outputs/bench/peers      # the table

The Flower peer is a timing reference only: Flower clients are stateless between rounds, so
user rows are kept in the Ray worker process that happens to run a client (its accuracy is not
compared). Seconds per round exclude the first round (Ray start-up and warm-up).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_PER_ROUND, DIM, LR, SEED = 256, 32, 10.0, 0


def export(out: Path) -> None:
    from common import ML1M_8020  # noqa: E402  (this folder is on sys.path when run as a script)

    from fedrun.app.compose import compose as compose_cfg
    from fedrun.app.plan import plan

    split = plan(compose_cfg(ML1M_8020 + ["track=none"])).dataset.load()
    train = split.train
    order = np.lexsort((train.item, train.user))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(train.user, minlength=train.n_users))])
    np.savez(out / "w0.npz", indptr=indptr, items=train.item[order], n_items=train.n_items)
    print(f"exported {len(train)} interactions, {train.n_users} users, {train.n_items} items")


def flower(out: Path, rounds: int) -> None:
    import flwr
    from flwr.client import NumPyClient
    from flwr.common import FitRes, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    data = np.load(out / "w0.npz")
    indptr, items, n_items = data["indptr"], data["items"], int(data["n_items"])
    n_users = len(indptr) - 1
    users_rows: dict[int, np.ndarray] = {}  # per worker process (see the module docstring)

    class MFClient(NumPyClient):
        def __init__(self, user: int):
            self.user = user

        def fit(self, parameters, config):
            table = parameters[0]  # [m, d]
            pos = items[indptr[self.user]:indptr[self.user + 1]]  # [P]
            rng = np.random.default_rng([SEED, int(config["round"]), self.user])
            neg = rng.integers(0, n_items, len(pos))  # one negative per positive (collisions ignored)
            p = users_rows.setdefault(self.user, np.random.default_rng([SEED, self.user]).normal(0, 0.1, DIM)
                                      .astype(np.float32))
            diff = table[pos] - table[neg]  # [P, d]
            g = -1.0 / (1.0 + np.exp(diff @ p))  # d/dx of -log σ(x) at x = ⟨p, q_pos − q_neg⟩, [P]
            touched, inverse = np.unique(np.concatenate([pos, neg]), return_inverse=True)
            grad_rows = np.zeros((len(touched), DIM), dtype=np.float32)
            np.add.at(grad_rows, inverse[:len(pos)], (g[:, None] * p) / len(pos))
            np.add.at(grad_rows, inverse[len(pos):], -(g[:, None] * p) / len(pos))
            users_rows[self.user] = p - LR * (g @ diff) / len(pos)
            return [touched.astype(np.int64), (-LR * grad_rows).astype(np.float32)], len(pos), {}

    class RowAverage(FedAvg):
        """Each item row: the mean delta over the round's clients that touched it."""

        def __init__(self, table, **kwargs):
            super().__init__(**kwargs)
            self.table, self.stamps = table, []

        def configure_fit(self, server_round, parameters, client_manager):
            pairs = super().configure_fit(server_round, parameters, client_manager)
            for _, fit_ins in pairs:
                fit_ins.config["round"] = server_round
            return pairs

        def aggregate_fit(self, server_round, results: list[tuple[object, FitRes]], failures):
            total = np.zeros_like(self.table)
            count = np.zeros(len(self.table), dtype=np.float32)
            for _, res in results:
                touched, delta = parameters_to_ndarrays(res.parameters)
                np.add.at(total, touched, delta)
                count[touched] += 1
            hit = count > 0
            self.table[hit] += total[hit] / count[hit, None]
            self.stamps.append(time.perf_counter())
            return ndarrays_to_parameters([self.table]), {}

    table = np.random.default_rng(SEED).normal(0, 0.1, (n_items, DIM)).astype(np.float32)
    strategy = RowAverage(table, fraction_fit=CLIENTS_PER_ROUND / n_users, min_fit_clients=CLIENTS_PER_ROUND,
                          min_available_clients=n_users, fraction_evaluate=0.0, min_evaluate_clients=0,
                          initial_parameters=ndarrays_to_parameters([table]))
    start = time.perf_counter()
    def client_fn(context):  # one virtual client per user: partition k = user k
        return MFClient(int(context.node_config["partition-id"])).to_client()

    start_simulation(client_fn=client_fn, num_clients=n_users,
                     config=ServerConfig(num_rounds=rounds), strategy=strategy,
                     client_resources={"num_cpus": 1, "num_gpus": 0.0})
    per_round = float(np.diff(strategy.stamps).mean())
    result = {"peer": f"Flower {flwr.__version__} simulation (Ray)", "seconds_per_round": per_round,
              "rounds_timed": len(strategy.stamps) - 1, "wall_seconds": time.perf_counter() - start,
              "peak_rss_gb": peak_rss_gb()}
    (out / "flower.json").write_text(json.dumps(result, indent=2))
    print(result)


def fedrun_w0(out: Path, rounds: int) -> None:
    from common import COMMON, MF, ML1M_8020

    from fedrun.app.build import build
    from fedrun.app.compose import compose as compose_cfg
    from fedrun.app.plan import plan
    from fedrun.kernels.env import RunEnv
    from fedrun.method.base import Method
    from fedrun.sim.trainer import trainer_for

    cfg = compose_cfg(ML1M_8020 + COMMON + MF + [f"sim.clients_per_round={CLIENTS_PER_ROUND}"])
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env)
    rounds_of = trainer_for(method, p.privacy, p.attack, p.defense, p.sim)
    rounds_of.train_round(0)  # warm-up, as for Flower
    start = time.perf_counter()
    for r in range(1, rounds + 1):
        rounds_of.train_round(r)
    result = {"peer": "fedrun (FedSGD fast path)" if rounds_of.uses_fast_path else "fedrun",
              "seconds_per_round": (time.perf_counter() - start) / rounds, "rounds_timed": rounds,
              "peak_rss_gb": peak_rss_gb()}
    (out / "fedrun.json").write_text(json.dumps(result, indent=2))
    print(result)


def report(out: Path) -> None:
    flower_result = json.loads((out / "flower.json").read_text())
    ours = json.loads((out / "fedrun.json").read_text())
    ratio = flower_result["seconds_per_round"] / ours["seconds_per_round"]
    lines = ["| engine | s/round | client updates/s | peak RSS of the main process (GB) |", "|---|---|---|---|"]
    for r in (ours, flower_result):
        lines.append(f"| {r['peer']} | {r['seconds_per_round']:.3f} | "
                     f"{CLIENTS_PER_ROUND / r['seconds_per_round']:,.0f} | {r['peak_rss_gb']:.2f} |")
    machine = platform.processor() or platform.machine()
    text = (f"# W0 peers ({machine}, {platform.python_version()})\n\n"
            + "\n".join(lines) + f"\n\nfedrun is **{ratio:.0f}×** Flower per round (target ≥ 250×). "
            "Flower's RSS is its "
            "driver's; its Ray workers are separate processes.\n")
    (out / "peers.md").write_text(text)
    print(text)


def peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["export", "flower", "fedrun", "report"])
    parser.add_argument("--out", default="outputs/bench/peers")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    {"export": lambda: export(out), "flower": lambda: flower(out, args.rounds),
     "fedrun": lambda: fedrun_w0(out, args.rounds * 5), "report": lambda: report(out)}[args.step]()


if __name__ == "__main__":
    main()
