"""W5: seconds and peak memory per round as clients per round (gowalla) and the catalogue (synthetic) grow,
each point in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from common import COMMON, GOWALLA, MF, TINY_DATA, build_method, peak_gpu_gb, reset_peak_rss, time_rounds, write_table

from fedrun.testing.measure import machine, peak_rss_gb

W5_CLIENTS = [16, 64, 256, 1024, 4096]


W5_ITEMS = [10**3, 10**4, 10**5, 10**6]


def bench_w5(args, out: Path) -> str:
    """Time per round and peak RSS of the fedrun path (W0's hyperparameters) as clients per round
    grow on gowalla and as the catalogue grows on synthetic data (1,024 users, 256 clients)."""
    device = [f"sim.device={args.device}"]
    clients_points = [4, 8, 16] if args.tiny else W5_CLIENTS
    items_points = [100, 1000] if args.tiny else W5_ITEMS
    by_clients = [point(args, (TINY_DATA if args.tiny else GOWALLA) + device + [f"sim.clients_per_round={c}"], c)
                  for c in clients_points]
    synthetic = ["dataset=synthetic", f"dataset.n_users={64 if args.tiny else 1024}", "dataset.mean_length=20",
                 "sim.clients_per_round=256", *device]
    by_items = [point(args, synthetic + [f"dataset.n_items={n}"], n) for n in items_points]
    memory = "peak GPU GB" if torch.device(args.device).type == "cuda" else "peak RSS GB"
    header = ["W5 axis", "value", "s / round", "growth", "client updates / s", memory]
    rows = growth_rows("clients/round", by_clients) + growth_rows("items", by_items)
    caption = (f"W5 scaling, FedAvg-MF (W0 hyperparameters), fedrun path; clients: "
               f"{'synthetic' if args.tiny else 'gowalla'}; items: synthetic, 256 clients/round; "
               f"{machine(args.device)}")
    text = write_table(out, "w5", header, rows, caption)
    plot_w5(out, by_clients, by_items, memory)
    return text


def point(args, overrides: list[str], value: int) -> tuple[int, float, float, int]:
    """(value, s / round, peak GB, clients per round) in a fresh process (own peak RSS; on a GPU,
    the peak GPU memory allocated)."""
    if args.tiny:  # a smoke test: in this process (its peak RSS is not the point's own)
        return value, *measure_point(overrides, args.rounds)
    code = ("import sys, json; sys.argv = ['bench']; import scaling as b; "
            f"print(json.dumps(b.measure_point({overrides!r}, {args.rounds})))")
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise SystemExit(f"W5 point {overrides} failed:\n{result.stderr[-3000:]}")
    seconds, rss, clients = json.loads(result.stdout.strip().splitlines()[-1])
    return value, seconds, rss, clients


def measure_point(overrides: list[str], rounds: int) -> tuple[float, float, int]:
    torch.set_num_threads(os.cpu_count() or 1)
    trainer, _ = build_method(COMMON + MF + overrides)
    reset_peak_rss()  # the dataset's parse is not part of a round's memory
    seconds = time_rounds(trainer, rounds)
    gpu = peak_gpu_gb(trainer.method.env.device)
    return seconds, peak_rss_gb() if gpu is None else gpu, trainer.sampler.per_round


def growth_rows(axis: str, points) -> list[list[str]]:
    rows, previous = [], None
    for value, seconds, rss, clients in points:
        growth = "" if previous is None else f"{seconds / previous[1]:.2f}× for {value / previous[0]:g}×"
        rows.append([axis, f"{value:,}", f"{seconds:.4f}", growth, f"{clients / seconds:,.0f}", f"{rss:.2f}"])
        previous = (value, seconds)
    return rows


def plot_w5(out: Path, by_clients, by_items, memory: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: W5 PNG skipped (the table is written)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, points, label in ((axes[0], by_clients, "clients per round"), (axes[1], by_items, "catalogue size")):
        x = [p[0] for p in points]
        ax.loglog(x, [p[1] for p in points], "o-", label="s / round")
        ax.loglog(x, [p[2] for p in points], "s--", label=memory)
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("W5: fedrun FedAvg-MF round time and memory")
    fig.tight_layout()
    fig.savefig(out / "w5.png", dpi=120)
