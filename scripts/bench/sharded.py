"""Sharded rounds (issue #64): W0, W2 and W11 on 1, 2 and 4 ranks — seconds per round, the all-gather's share of
the round, peak RSS per rank — and the same round's final item table on every rank count (it must not move).

    python scripts/bench/sharded.py [--ranks 1,2,4] [--workloads w0,w2,w11] [--rounds 10] [--threads 1]
                                    [--out outputs/bench/sharded] [--tiny]

For each workload and rank count the driver launches ``torchrun --nproc_per_node=N`` on this script
(``--worker``). Each rank builds the workload as a run does, takes two warm-up rounds and ``--rounds`` timed rounds
on the general path (a sharded round never takes the FedSGD pass), times the all-gather
(``World.gather_results``) inside them, and reports; rank 0 writes one JSON line per rank count. Every rank runs
``--threads`` torch threads, so N ranks use N × threads cores: on a machine with fewer cores than that, the ranks
share them and the times say so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import COMMON, GOWALLA, MF, ML1M_8020, TINY_DATA, reset_peak_rss, write_table
from training import W11_LIGHTGCN

from fedrun.app.build import build
from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.sim import distributed
from fedrun.sim.trainer import trainer_for
from fedrun.testing.measure import machine, peak_rss_gb, sync

WORKLOADS = {  # title, data, settings, clients per round
    "w0": ("W0 FedAvg-MF (BPR, dim 32), ml-1m split80-20, 256 clients", ML1M_8020, COMMON + MF, 256),
    "w2": ("W2 FedAvg-MF (BPR, dim 32), gowalla, 1,024 clients", GOWALLA, COMMON + MF, 1024),
    "w11": ("W11 FedAvg-LightGCN over ego graphs (K = 2, dim 64), gowalla, 256 clients", GOWALLA, W11_LIGHTGCN, 256),
}


def worker(args) -> None:
    """One rank: build, warm up, time the rounds and the all-gather; rank 0 prints the JSON row."""
    torch.set_num_threads(args.threads)
    _, data, settings, clients = WORKLOADS[args.worker]
    cfg = compose((TINY_DATA if args.tiny else data) + settings + [
        f"sim.clients_per_round={64 if args.tiny else clients}", "sim.fast_path=off", f"sim.threads={args.threads}"])
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    trainer = trainer_for(build(cfg.method, "method", Method, env=env), p.privacy, p.attack, p.defense, p.sim,
                          p.world)
    gathered = {"seconds": 0.0}
    gather = distributed.World.gather_results

    def timed_gather(self, *a, **kw):
        started = time.perf_counter()
        try:
            return gather(self, *a, **kw)
        finally:
            gathered["seconds"] += time.perf_counter() - started

    distributed.World.gather_results = timed_gather  # type: ignore[method-assign]
    client = trainer.method.client
    step = client.step
    stepped = {"seconds": 0.0}

    def timed_step(problem):
        started = time.perf_counter()
        try:
            return step(problem)
        finally:
            stepped["seconds"] += time.perf_counter() - started

    client.step = timed_step  # type: ignore[method-assign]
    for r in range(2):
        trainer.train_round(r)
    sync(env.device)
    reset_peak_rss()
    gathered["seconds"] = stepped["seconds"] = 0.0
    uploaded = 0.0
    started = time.perf_counter()
    for r in range(2, 2 + args.rounds):
        stats = trainer.train_round(r)
        uploaded += stats.bytes_up * stats.n_clients
    sync(env.device)
    per_round = (time.perf_counter() - started) / args.rounds
    row = {"per_round": per_round, "gather_share": gathered["seconds"] / args.rounds / per_round,
           "step_share": stepped["seconds"] / args.rounds / per_round, "upload_mb": uploaded / args.rounds / 2**20,
           "rss_gb": peak_rss_gb(), "item_sha": hashlib.sha256(trainer.method.public.item.numpy().tobytes())
           .hexdigest()[:12], "rank": p.world.rank}
    rows = [row]
    if p.world.sharded:
        import torch.distributed as dist

        every: list = [None] * p.world.size
        dist.all_gather_object(every, row)
        rows = every
    if p.world.leads:
        print("ROW " + json.dumps(rows), flush=True)


def drive(args) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    tables = []
    for name in args.workloads.split(","):
        title = WORKLOADS[name][0]
        results: dict[int, list[dict]] = {}
        for ranks in [int(n) for n in args.ranks.split(",")]:
            command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", __file__,
                       "--worker", name, "--rounds", str(args.rounds), "--threads", str(args.threads)]
            done = subprocess.run(command + (["--tiny"] if args.tiny else []), capture_output=True, text=True,
                                  env=env, cwd=Path(__file__).parent)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("ROW ")), None)
            if done.returncode != 0 or line is None:
                sys.exit(f"{name} on {ranks} rank(s) failed:\n{done.stderr[-3000:]}")
            results[ranks] = json.loads(line[4:])
            print(f"{name} {ranks} rank(s): {results[ranks][0]['per_round']:.3f} s/round", flush=True)
        one = results[min(results)][0]["per_round"]
        shas = {rows[0]["item_sha"] for rows in results.values()}
        rows = [[str(n), f"{rs[0]['per_round']:.3f}", f"{one / rs[0]['per_round']:.2f}×",
                 f"{max(r['step_share'] for r in rs):.0%}", f"{max(r['gather_share'] for r in rs):.0%}",
                 f"{rs[0]['upload_mb']:.1f}", f"{max(r['rss_gb'] for r in rs):.2f}"]
                for n, rs in sorted(results.items())]
        agreement = "identical on every rank count" if len(shas) == 1 else f"DIFFERS across rank counts: {shas}"
        caption = (f"{title}{' [tiny synthetic]' if args.tiny else ''}: {args.rounds} rounds after 2 warm-up, general "
                   f"path, {args.threads} thread(s) per rank; {machine('cpu')}. Item table after the rounds "
                   f"{agreement}.")
        header = ["ranks", "s / round", "speed-up", "client-step share (max rank)",
                  "all-gather share (max rank, waiting included)", "uploads / round (MB)", "peak RSS per rank (GB)"]
        tables.append(write_table(args.out, f"sharded-{name}", header, rows, caption))
        if len(shas) != 1:
            print(tables[-1])
            sys.exit(f"{name}: the item table moved with the rank count")
    print("\n".join(tables))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKLOADS))
    parser.add_argument("--workloads", default="w0,w2,w11")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "outputs/bench/sharded")
    args = parser.parse_args()
    worker(args) if args.worker else drive(args)


if __name__ == "__main__":
    main()
