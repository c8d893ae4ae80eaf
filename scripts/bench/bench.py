"""Benchmark the vectorized simulator against the per-client loop and a centralized epoch.

Workloads (issue #7), each measured in one run on the same data and hyperparameters:

  W0  FedAvg-MF (BPR, dim 32, 1 negative, one local SGD step), ml-1m split80-20, 256 clients
  W1  FedAvg-NCF, ml-1m split80-20, 256 clients, 4 negatives per positive, 1 local epoch
  W2  FedAvg-MF (BPR), gowalla, 1,024 clients per round
  W3  as W1 with 5 local epochs and Adam
  W4  full-ranking evaluation of every test user (ml-1m, gowalla) vs a bare matmul + topk
  W5  scaling: clients per round on gowalla; catalogue size on synthetic data (PNG + table)
  W6  FedCL-NCF with FedCL's Table 3 settings (ml-1m LOO, 16 clients, LDP embeddings, 10 local + 20
      semi-hard negatives): the FedSGD fast path against per-client copies, same draws
  W7  FedCL's server reclustering (Ward into 25 clusters) of ε = 4 LDP uploads at the user counts
      of ml-1m, Beauty, Yelp and Sports: faiss k-means pre-aggregation vs scikit-learn k-means++
  W8  NeuMF full ranking (FedCL's NCF: dim 64, tower 128-64-32) of every user at ml-1m and Beauty
      sizes: the tower in cache-sized blocks vs one pass over each evaluation chunk
  W9  robust aggregation rules on one W0 round's uploads, against the mean in the same run
  W10 W0's round (general path) without and with A-hum clients at 0.1% and 5%: time and peak RSS
  W11 FedAvg on LightGCN over the clients' ego graphs (K = 2, dim 64, every neighbour sent), gowalla,
      256 clients: the bucketed round vs the same clients one per bucket (a per-client loop through the
      same code, checked to give the same update), and vs a centralized LightGCN epoch per interaction
  W12 one centralized LightGCN epoch (K = 3, dim 64, batch 2,048), gowalla: the graph product's backward
      through the prebuilt transpose (``GraphProduct``) vs autograd's own ``sparse.mm`` backward, which
      transposes the CSR matrix at every call; both epochs must end at the same tables
  W13 PerFedRec++ rounds at Table 4's setting (yelp-perfedrec, 256 clients): the ego graphs propagated as
      CSR products in edge order vs the segment sums (``index_add``) they replaced; same item tables

Paths of a training workload:
  - fedrun:  the simulator as a run uses it (``sim.fast_path=auto``: FedSGD fast path when exact)
  - general: per-client copies, bucketed (``sim.fast_path=off``), when it differs from the above
  - loop:    the plain per-client loop with a deepcopy of the model per client (fedrun/testing),
             checked to compute the same update as the general path before it is timed
  - central: one centralized epoch over the same interactions, same backbone, batch 1,024

Each workload runs in its own process so that its peak RSS is its own (``--tiny``, a smoke test: all in one
process). Writes Markdown + CSV (and W5 PNGs) to ``--out`` and prints the tables.

    python scripts/bench/bench.py [--workloads w0,w1,w2,w3,w4,w5] [--rounds 20] [--loop-rounds 3] [--tiny]
                            [--device cpu|cuda]

On a GPU (``--device cuda``) every timed step ends with ``torch.cuda.synchronize`` and the
captions add the device's peak allocated memory; ``scripts/checks/device_check.py`` checks that the
device computes what the CPU computes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.build import build  # noqa: E402
from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import plan  # noqa: E402
from fedrun.eval.base import Evaluator  # noqa: E402
from fedrun.kernels.env import RunEnv  # noqa: E402
from fedrun.method.base import Method  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.sim.trainer import trainer_for  # noqa: E402
from fedrun.testing.fedavg_loop import clients_of, fedavg_round  # noqa: E402
from fedrun.testing.measure import machine, peak_rss_gb, sync  # noqa: E402
from fedrun.types import Uploads  # noqa: E402

ML1M_8020 = ["dataset=ml-1m", "dataset.variant=split80-20", "dataset.split.protocol=predefined"]
GOWALLA = ["dataset=gowalla", "dataset.split.protocol=predefined"]
COMMON = ["method=fedavg", "method.optimizer.name=sgd", "method.optimizer.lr=10", "method.optimizer.user_lr=null",
          "method.loss_reduction=mean", "sim.local_epochs=1", "track=none", "sim.progress=false"]  # the recorded W0
MF = ["backbone=mf", "backbone.dim=32", "backbone.loss=bpr", "method.num_negatives=1"]
NCF = ["backbone=ncf", "method.num_negatives=4"]
# The tiny variant (tests, smoke runs): the same workloads on a small synthetic dataset.
TINY_DATA = ["dataset=synthetic", "dataset.n_users=300", "dataset.n_items=400", "dataset.mean_length=12"]


@dataclass
class Workload:
    name: str
    title: str
    data: list[str]
    overrides: list[str]
    clients: int
    central: list[str] = field(default_factory=list)  # extra overrides for the central epoch


TRAIN = {
    "w0": Workload("w0", "FedAvg-MF (BPR, dim 32, 1 neg., 1 local SGD step), ml-1m split80-20",
                   ML1M_8020, MF, 256),
    "w1": Workload("w1", "FedAvg-NCF (4 neg., 1 local epoch), ml-1m split80-20", ML1M_8020, NCF, 256),
    "w2": Workload("w2", "FedAvg-MF (BPR, dim 32, 1 neg.), gowalla", GOWALLA, MF, 1024),
    "w3": Workload("w3", "FedAvg-NCF (4 neg., 5 local epochs, Adam), ml-1m split80-20", ML1M_8020,
                   NCF + ["sim.local_epochs=5", "method.optimizer.name=adam", "method.optimizer.lr=0.001"], 256,
                   central=["method.optimizer.name=adam", "method.optimizer.lr=0.001"]),
}


# ---------------------------------------------------------------------------------------- helpers

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
    user_table, public = method.private.user.clone(), method.public.clone()
    clients = clients_of(method.problems(trainer.sampler.users(round_index), round_index))  # not timed
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


# ---------------------------------------------------------------------------------- W0 – W3: training

def bench_train(work: Workload, args, out: Path) -> str:
    data = TINY_DATA if args.tiny else work.data
    clients = min(work.clients, 64) if args.tiny else work.clients
    overrides = data + COMMON + work.overrides + [f"sim.clients_per_round={clients}", f"sim.device={args.device}"]
    reset_peak_rss()
    fedrun, env = build_method(overrides)
    t_fedrun = time_rounds(fedrun, args.rounds)
    rss_fedrun, memory = peak_rss_gb(), memory_note(env.device)
    paths = [("fedrun (FedSGD fast path)" if fedrun.uses_fast_path else "fedrun (general)", t_fedrun)]
    general = fedrun
    if fedrun.uses_fast_path:
        general, _ = build_method(overrides + ["sim.fast_path=off"])
        paths.append(("general (copies)", time_rounds(general, args.rounds)))
    max_diff = check_loop_agrees(general, env, args.rounds + 2)
    t_loop = sum(loop_round(general, env, args.rounds + 3 + r)[0] for r in range(args.loop_rounds)) / args.loop_rounds
    paths.append(("loop (deepcopy)", t_loop))
    federated_only = ("method.loss_reduction=", "sim.local_epochs=")  # FedAvg's settings that central refuses
    central, _ = build_method([o for o in overrides if not o.startswith(federated_only)]
                              + ["method=central", "method.optimizer.name=sgd", "method.optimizer.lr=0.05",
                                 "method.batch_size=1024", *work.central])
    sync(env.device)
    started = time.perf_counter()
    central.train_round(0)
    sync(env.device)
    t_central = time.perf_counter() - started
    per_epoch = fedrun.rounds_per_epoch()
    rows = [[name, f"{s:.4f}", f"{clients / s:,.0f}", f"{t_loop / s:.1f}×", f"{s * per_epoch:.2f}",
             f"{s * per_epoch / t_central:.2f}×"] for name, s in paths]
    rows.append(["central epoch", "", "", "", f"{t_central:.2f}", "1.00×"])
    header = [f"{work.name.upper()} path", "s / round", "client updates / s", "vs loop", "s / epoch",
              "epoch vs central"]
    caption = (f"{work.name.upper()} {work.title}{' [tiny synthetic]' if args.tiny else ''}: {clients} clients/round, "
               f"{per_epoch} rounds/epoch; {machine(args.device)}; "
               f"peak RSS of the fedrun path {rss_fedrun:.2f} GB{memory}; "
               f"loop vs general path after one round from one state: max |Δ item| = {max_diff:.1e}")
    return write_table(out, work.name, header, rows, caption)


# --------------------------------------------------------------------------- W6: FedCL's fast path

W6_FEDCL = ["method=fedcl", "privacy=ldp", "backbone=fedcl/ncf", "dataset.min_item_count=5", "dataset.split.valid=true",
            "eval=full", "sim.clients_per_round=16", "track=none", "sim.progress=false"]


def bench_w6(args, out: Path) -> str:
    """FedCL-NCF rounds (exchange, clustering every 100 rounds amortised, local step, server Adam):
    the fast path and the general path from the same seed, and how far apart their models end."""
    data = TINY_DATA if args.tiny else ["dataset=ml-1m"]
    overrides = data + W6_FEDCL + [f"sim.device={args.device}"]
    paths = []
    for name, extra in [("fedrun (FedSGD fast path)", []), ("general (copies)", ["sim.fast_path=off"])]:
        method, env = build_method(overrides + extra)
        paths.append((name, time_rounds(method, args.rounds), method))
    (_, t_fast, fast), (_, t_general, general) = paths
    max_diff = float((fast.method.public.item - general.method.public.item).abs().max())
    per_epoch = fast.rounds_per_epoch()
    header = ["W6 path", "s / round", "vs general", "s / epoch", "20 epochs (h)"]
    rows = [[name, f"{s:.4f}", f"{t_general / s:.1f}×", f"{s * per_epoch:.1f}", f"{s * per_epoch * 20 / 3600:.2f}"]
            for name, s, _ in paths]
    caption = (f"W6 FedCL-NCF, Table 3 settings{' [tiny synthetic]' if args.tiny else ', ml-1m'}: 16 clients/round, "
               f"{per_epoch} rounds/epoch, {args.rounds} timed rounds after 2 warm-up; {machine(args.device)}; "
               f"after {args.rounds + 2} rounds from one seed: max |Δ item| fast vs general = {max_diff:.1e}")
    return write_table(out, "w6", header, rows, caption)


# ------------------------------------------------------------------------------------- W7: reclustering

W7_USERS = {"ml-1m": 6040, "beauty": 22363, "yelp": 30431, "sports": 35598}


def bench_w7(args, out: Path) -> str:
    """One reclustering of the server's cache: N uploads of dim 64, each a random embedding
    L1-clipped to 1 plus Laplace(2/ε) noise (ε = 4, FedCL §3.1), into 25 clusters. Above
    ``ward_max_points`` (10,000) Ward runs on 1,000 k-means mini-centroids: fedrun's faiss
    Lloyd against the previous scikit-learn k-means++ (the baseline), same points."""
    import numpy as np

    from fedrun.privacy.ldp import clip_rows, sample_noise
    from fedrun.retrieval import cluster as clustering

    sizes = {"tiny": 3000} if args.tiny else W7_USERS
    limit, pre = (1000, 100) if args.tiny else (10000, 1000)
    generator = torch.Generator().manual_seed(0)
    warm = torch.randn(400, 64, generator=generator)  # imports and first calls are not timed
    clustering.cluster(warm, "ward", 25, seed=1, ward_max_points=200, pre_clusters=100)
    clustering._kmeans(warm.numpy().astype(np.float64), 100, 1)
    rows = []
    for name, users in sizes.items():
        uploads = clip_rows(torch.randn(users, 64, generator=generator), "l1", 1.0)
        uploads = uploads + sample_noise(uploads.shape, "laplace", 2.0 / 4.0, generator, torch.device("cpu"))
        start = time.perf_counter()
        clustering.cluster(uploads, "ward", 25, seed=1, ward_max_points=limit, pre_clusters=pre)
        t_fedrun = time.perf_counter() - start
        if users <= limit:
            rows.append([name, f"{users:,}", "exact Ward", f"{t_fedrun:.2f}", "–", "–", "–"])
            continue
        data = uploads.numpy().astype(np.float64)
        start = time.perf_counter()
        baseline = clustering._kmeans(data, pre, 1)
        t_sklearn = time.perf_counter() - start + clustering_tail(clustering, data, baseline)
        fedrun_labels = clustering._faiss_kmeans(data, pre, 1)
        inertia = [mini_inertia(clustering, data, labels) for labels in (fedrun_labels, baseline)]
        rows.append([name, f"{users:,}", f"Ward on {pre:,} k-means", f"{t_fedrun:.2f}", f"{t_sklearn:.2f}",
                     f"{t_sklearn / t_fedrun:.1f}×", f"{inertia[0] / inertia[1]:.3f}"])
    header = ["W7 users like", "uploads", "clustering", "fedrun s", "sklearn k-means++ s", "speed-up",
              "inertia fedrun / sklearn"]
    caption = (f"W7 one reclustering of ε = 4 LDP uploads (dim 64, 25 clusters){' [tiny]' if args.tiny else ''}; "
               f"{machine()}; torch threads {torch.get_num_threads()}")
    return write_table(out, "w7", header, rows, caption)


def clustering_tail(clustering, data, coarse) -> float:
    """Seconds of the Ward step on the baseline's mini-centroids (what follows its k-means)."""
    start = time.perf_counter()
    clustering._ward(clustering._means(data, coarse, int(coarse.max()) + 1), 25)
    return time.perf_counter() - start


def mini_inertia(clustering, data, labels) -> float:
    """Sum of squared distances of the points to their mini-centroid."""
    means = clustering._means(data, labels, int(labels.max()) + 1)
    return float(((data - means[labels]) ** 2).sum())


# ------------------------------------------------------------------------------------- W4: evaluation

W4_DATA = {"ml-1m": ["dataset=ml-1m"], "gowalla": GOWALLA}


def bench_w4(args, out: Path) -> str:
    rows = []
    for name, data in ({"synthetic": TINY_DATA} if args.tiny else W4_DATA).items():
        rows.append(bench_w4_one(name, data + [f"sim.device={args.device}"]))
    header = ["W4 dataset", "users", "items", "eval s", "floor s", "eval / floor", "peak RSS GB", "peak GPU GB"]
    caption = f"W4 full-ranking evaluation (MF dim 32, eval.memory_mb=256, K = 5, 10, 20); {machine(args.device)}"
    return write_table(out, "w4", header, rows, caption)


def bench_w4_one(name: str, data: list[str]) -> list[str]:
    """Every test user (MF, dim 32) vs the floor: the same users' ``U @ Vᵀ`` and
    ``topk(K_max + 1)`` in the same chunks, nothing else."""
    reset_peak_rss()
    cfg = compose(data + ["backbone=mf", "method=fedavg", "track=none", "sim.clients_per_round=1"])
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env)
    evaluator = build(cfg.eval, "eval", Evaluator, split=env.split, device=env.device, rating=False)
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    chunk = evaluator.chunk_users(env.n_items)
    k = max(evaluator.config.ks) + 1
    sync(env.device)
    started = time.perf_counter()
    evaluator.evaluate(method, "test")
    sync(env.device)
    t_eval = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():
        for part in torch.split(users.to(env.device), chunk):
            (method.private.user[part] @ method.public.item.T).topk(k, dim=1)
    sync(env.device)
    t_floor = time.perf_counter() - started
    gpu = peak_gpu_gb(env.device)
    return [name, f"{users.numel():,}", f"{env.n_items:,}", f"{t_eval:.2f}", f"{t_floor:.2f}",
            f"{t_eval / t_floor:.2f}×", f"{peak_rss_gb():.2f}", "" if gpu is None else f"{gpu:.2f}"]


# ------------------------------------------------------------------------------ W8: NeuMF full ranking

W8_SIZES = {"ml-1m": (6040, 3416), "beauty": (22363, 12101)}  # users, items (FedCL's LOO splits)


def bench_w8(args, out: Path) -> str:
    from fedrun.backbone.ncf import NCF, NCFConfig

    device = torch.device(args.device)
    backbone = NCF(NCFConfig(dim=64, layers=[128, 64, 32]))
    gen = torch.Generator().manual_seed(0)
    net = {name: tensor.to(device) for name, tensor in backbone.init_net(gen).items()}
    rows = []
    for name, (n_users, n_items) in ({"tiny": (500, 300)} if args.tiny else W8_SIZES).items():
        user = torch.randn(n_users, backbone.user_width, generator=gen).to(device)
        item = torch.randn(n_items, backbone.item_width, generator=gen).to(device)
        chunk = (256 << 20) // (n_items * 4)  # the evaluator's chunk at eval.memory_mb=256
        t_blocked = time_chunks(lambda u, item=item: backbone.score_full(u, item, net), user, chunk, device)
        old_chunk = (256 << 20) // (n_items * 4 * (2 * 128 + 1))  # it sized chunks by the tower's intermediates
        t_one_pass = time_chunks(lambda u, item=item: one_pass_neumf(backbone, u, item, net), user, old_chunk, device)
        with torch.no_grad():
            sample = user[:old_chunk]
            baseline = one_pass_neumf(backbone, sample, item, net)
            diff = float((backbone.score_full(sample, item, net) - baseline).abs().max())
        rows.append([name, f"{n_users:,}", f"{n_items:,}", f"{t_blocked:.2f}", f"{t_one_pass:.2f}",
                     f"{t_one_pass / t_blocked:.1f}×", f"{diff:.1e}"])
    header = ["W8 size like", "users", "items", "blocked s", "one pass s", "speed-up", "max |Δ score|"]
    caption = (f"W8 NeuMF scores of every (user, item) pair (dim 64, tower 128-64-32, "
               f"{torch.get_num_threads()} threads); {machine(args.device)}")
    return write_table(out, "w8", header, rows, caption)


def time_chunks(score, user: torch.Tensor, chunk: int, device: torch.device) -> float:
    """Seconds to score every user in chunks of ``chunk`` users."""
    sync(device)
    started = time.perf_counter()
    with torch.no_grad():
        for part in torch.split(user, chunk):
            score(part)
    sync(device)
    return time.perf_counter() - started


def one_pass_neumf(backbone, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
    """The pre-session-12 NeuMF full ranking: the whole chunk's [U, I, h1] tower at once (baseline)."""
    g = backbone.gmf_dim
    head_w = net["head.weight"][0]
    scores = net["head.bias"] + (user[:, :g] * head_w[:g]) @ item[:, :g].T  # [U, I]
    w_user, w_item, bias = backbone._first_layer(net)
    hidden = (user[:, g:] @ w_user.T)[:, None, :] + (item[:, g:] @ w_item.T + bias)[None]  # [U, I, h1]
    return scores + backbone._tower(hidden, net) @ head_w[g:]


# ---------------------------------------------------------------------------------------- W5: scaling

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
    code = ("import sys, json; sys.argv = ['bench']; import bench as b; "
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


# ------------------------------------------------------------------------------------------------ main

# ------------------------------------------------------------------- W9: robust aggregation rules

W9_RULES = [("mean", "defense=mean"), ("median", "defense=median"), ("trimmed_mean", "defense=trimmed_mean"),
            ("norm_bound", "defense=norm_bound"), ("hics", "defense=hics"), ("krum", "defense=krum"),
            ("multi_krum", "defense=multi_krum")]


def sort_select(values: torch.Tensor, ranks: tuple[int, ...]) -> torch.Tensor:
    """The baseline selection: a full sort of every row's uploads (what median and trimmed mean did before the
    CPU selection, ``fedrun.defense._rows.order_statistics``)."""
    return values.sort(dim=1).values


def timed_aggregate(rule, uploads: Uploads, device: torch.device, repeats: int = 5) -> float:
    """Seconds per ``rule.aggregate(uploads)``, the mean of ``repeats`` calls after a warm-up."""
    rule.aggregate(uploads)
    sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        rule.aggregate(uploads)
    sync(device)
    return (time.perf_counter() - started) / repeats


def bench_w9(args, out: Path) -> str:
    """Each rule aggregating the same round of W0 uploads (256 clients' sparse item rows, general path),
    against the mean's time in the same run (issue #31: ≤ 3× for median / trimmed mean / norm bound,
    ≤ 10× for Krum and Multi-Krum); median and trimmed mean also with the full sort they used before the
    selection, as the baseline."""
    from fedrun.defense import median, trimmed_mean

    data = TINY_DATA if args.tiny else ML1M_8020
    clients = 64 if args.tiny else 256
    base = data + COMMON + MF + [f"sim.clients_per_round={clients}", "sim.fast_path=off", f"sim.device={args.device}"]
    trainer, env = build_method(base)
    captured = {}
    aggregate = trainer.defense.aggregate
    trainer.defense.aggregate = lambda uploads, ctx=None: captured.setdefault("uploads", uploads) and aggregate(
        uploads, ctx)
    trainer.train_round(0)
    uploads = captured["uploads"]
    counts = torch.bincount(uploads.row_item)
    counts = counts[counts > 0]
    times = {}
    for name, override in W9_RULES:
        rule = build_method(data + COMMON + MF + [override, "sim.clients_per_round=4"])[0].defense
        times[name] = timed_aggregate(rule, uploads, env.device)
        if name in ("median", "trimmed_mean"):
            module = median if name == "median" else trimmed_mean
            selection = module.order_statistics
            module.order_statistics = sort_select
            try:
                times[f"{name} (full sort, before)"] = timed_aggregate(rule, uploads, env.device)
            finally:
                module.order_statistics = selection
    rows = [[name, f"{t * 1000:.1f}", f"{t / times['mean']:.1f}×"] for name, t in times.items()]
    caption = (f"W9 robust aggregation of one W0 round{' [tiny synthetic]' if args.tiny else ''}: {clients} clients, "
               f"{uploads.row_item.numel():,} uploaded rows of width {uploads.row_delta.shape[1]} over "
               f"{counts.numel():,} items (uploaders per row: median {int(counts.median())}, max {int(counts.max())}); "
               f"{machine(args.device)}; mean of {5} calls after a warm-up")
    return write_table(out, "w9", ["W9 rule", "ms / round", "vs mean"], rows, caption)


# ------------------------------------------------------- W11: federated LightGCN over ego graphs

W11_LIGHTGCN = ["method=fedavg", "backbone=lightgcn", "backbone.dim=64", "backbone.layers=2",
                "method.optimizer.name=sgd", "method.optimizer.lr=100", "method.optimizer.user_lr=null",
                "method.loss_reduction=mean", "track=none", "sim.progress=false"]


def bench_w11(args, out: Path) -> str:
    """A federated LightGCN round (the round's clients refresh, expand their ego graphs, train, upload)
    bucketed as runs do, against the same round one client per bucket — a per-client loop over the same
    code, which must give the same item table — and against one centralized LightGCN epoch, per interaction."""
    data = TINY_DATA if args.tiny else GOWALLA
    clients = 64 if args.tiny else 256
    base = data + W11_LIGHTGCN + [f"sim.clients_per_round={clients}", f"sim.device={args.device}"]
    reset_peak_rss()
    fedrun, env = build_method(base)
    t_fedrun = time_rounds(fedrun, args.rounds)
    rss, memory = peak_rss_gb(), memory_note(env.device)
    loop, _ = build_method(base + [f"sim.buckets={clients}", "sim.min_bucket_clients=1"])
    t_loop = time_rounds(loop, args.loop_rounds)
    max_diff = float((loop.method.public.item - build_and_run(base, args.loop_rounds + 2)).abs().max())
    interactions = float(env.train.sizes(fedrun.sampler.users(0)).sum())
    central, _ = build_method(data + ["method=central", "backbone=lightgcn", "backbone.dim=64", "backbone.layers=2",
                                      "method.batch_size=2048", "track=none", "sim.progress=false",
                                      f"sim.device={args.device}"])
    sync(env.device)
    started = time.perf_counter()
    central.train_round(0)
    sync(env.device)
    t_central = time.perf_counter() - started
    per_central = t_central / env.train.items.numel()
    rows = [[name, f"{s:.3f}", f"{s / interactions * 1e6:.1f}", f"{t_loop / s:.1f}×",
             f"{s / interactions / per_central:.1f}×"]
            for name, s in [("fedrun (bucketed)", t_fedrun), ("per-client loop (one per bucket)", t_loop)]]
    rows.append(["central epoch (batch 2,048)", f"{t_central:.2f}", f"{per_central * 1e6:.1f}", "", "1.0×"])
    tiny = " [tiny synthetic]" if args.tiny else ""
    caption = (f"W11 FedAvg-LightGCN over ego graphs (K = 2, dim 64, all neighbours){tiny}: {clients} clients/round "
               f"({interactions:,.0f} interactions); {machine(args.device)}; "
               f"peak RSS of the fedrun path {rss:.2f} GB{memory}; loop vs bucketed after the same rounds: "
               f"max |Δ item| = {max_diff:.1e}")
    header = ["W11 path", "s / round", "µs / interaction", "vs loop", "per interaction vs central"]
    return write_table(out, "w11", header, rows, caption)


# ------------------------------------------------------- W12: the centralized LightGCN epoch's graph product

W12_CENTRAL = ["method=central", "backbone=lightgcn", "backbone.dim=64", "backbone.layers=3", "method.batch_size=2048",
               "track=none", "sim.progress=false"]


def autograd_product(matrix: torch.Tensor, transpose: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """The baseline: ``sparse.mm`` with autograd's backward (it transposes ``matrix`` at every call)."""
    return torch.sparse.mm(matrix, dense)


def bench_w12(args, out: Path) -> str:
    """One centralized LightGCN epoch with the prebuilt-transpose backward and one with autograd's, same seeds."""
    from fedrun.backbone import lightgcn

    data = TINY_DATA if args.tiny else GOWALLA
    base = data + W12_CENTRAL + [f"sim.device={args.device}"]
    seconds, tables = {}, {}
    for name, baseline in [("autograd sparse.mm backward", True), ("prebuilt transpose (GraphProduct)", False)]:
        trainer, env = build_method(base)
        if baseline:  # shadows the inherited ``Function.apply`` for this epoch only
            lightgcn.GraphProduct.apply = staticmethod(autograd_product)
        try:
            sync(env.device)
            started = time.perf_counter()
            trainer.train_round(0)
            sync(env.device)
        finally:
            if baseline:
                del lightgcn.GraphProduct.apply
        seconds[name] = time.perf_counter() - started
        tables[name] = trainer.method.item.detach().cpu()
    baseline, ours = seconds
    max_diff = float((tables[baseline] - tables[ours]).abs().max())
    rows = [[name, f"{s:.2f}", f"{seconds[baseline] / s:.2f}×"] for name, s in seconds.items()]
    tiny = " [tiny synthetic]" if args.tiny else ""
    caption = (f"W12 one centralized LightGCN epoch (K = 3, dim 64, batch 2,048){tiny}, {env.train.items.numel():,} "
               f"interactions; {machine(args.device)}{memory_note(env.device)}; item tables after the epoch: "
               f"max |Δ| = {max_diff:.1e}")
    return write_table(out, "w12", ["W12 graph product backward", "s / epoch", "speed-up"], rows, caption)


# ------------------------------------------------ W13: PerFedRec++ rounds, ego graphs as CSR products

W13_PERFEDRECPP = ["+experiment=perfedrecpp/table4", "row=perfedrecpp/perfedrecpp", "track=none", "sim.progress=false"]
W13_TINY = TINY_DATA + ["method=perfedrecpp", "backbone=lightgcn", "method.pretrain_rounds=1", "method.clusters=2",
                        "track=none", "sim.progress=false"]


def bench_w13(args, out: Path) -> str:
    """PerFedRec++ rounds at Table 4's setting (Yelp, LightGCN K = 2, dim 64, 256 clients; the pre-training
    rounds, then the personalised ones): the clients' ego graphs propagated as CSR products in edge order
    (``EdgeOperator``) vs the segment sums they replaced, same seeds; both must end at the same item table."""
    from fedrun.backbone.lightgcn import SegmentSums
    from fedrun.kernels import ego

    base = (W13_TINY if args.tiny else W13_PERFEDRECPP) + [f"sim.device={args.device}"]
    seconds, tables, products = {}, {}, ego.EgoGraphs.operator
    build_method(base)[0].train_round(0)  # warm-up: the process's one-time costs fall on neither path
    for name, baseline in [("segment sums (index_add, before)", True), ("CSR products in edge order", False)]:
        trainer, env = build_method(base)
        pretrain = trainer.method.config.pretrain_rounds
        phases = [("pre-training", range(pretrain)), ("personalised", range(pretrain, pretrain + args.loop_rounds))]
        if baseline:
            ego.EgoGraphs.operator = property(lambda graphs: SegmentSums(graphs.src, graphs.dst, graphs.weight))
        try:
            for phase, rounds in phases:
                sync(env.device)
                started = time.perf_counter()
                for r in rounds:
                    trainer.train_round(r)
                sync(env.device)
                seconds[name, phase] = (time.perf_counter() - started) / len(rounds)
        finally:
            ego.EgoGraphs.operator = products
        tables[name] = trainer.method.public.item.detach().cpu()
    baseline, ours = tables
    same = torch.equal(tables[baseline], tables[ours])
    max_diff = float((tables[baseline] - tables[ours]).abs().max())
    rows = [[name, phase, f"{s:.3f}", f"{seconds[baseline, phase] / s:.2f}×"] for (name, phase), s in seconds.items()]
    tiny = " [tiny synthetic]" if args.tiny else ""
    caption = (f"W13 PerFedRec++ rounds (LightGCN K = 2 over the clients' ego graphs){tiny}: {pretrain} pre-training "
               f"rounds, then {args.loop_rounds} personalised; {machine(args.device)}, {torch.get_num_threads()} "
               f"thread(s); item tables after the rounds: {'the same bits' if same else 'differ'} (max |Δ| = "
               f"{max_diff:.1e})")
    return write_table(out, "w13", ["W13 ego-graph propagation", "phase", "s / round", "speed-up"], rows, caption)


def build_and_run(overrides: list[str], rounds: int) -> torch.Tensor:
    """The item table after ``rounds`` bucketed rounds from the seed (what the loop must match)."""
    trainer, _ = build_method(overrides)
    for r in range(rounds):
        trainer.train_round(r)
    return trainer.method.public.item


# ---------------------------------------------------------------- W10: the round with an attack

W10_CASES = [("no attack", []), ("A-hum 0.1%", ["attack=a_hum", "attack.fraction=0.001", "attack.lr=0.01"]),
             ("A-hum 5%", ["attack=a_hum", "attack.fraction=0.05", "attack.lr=0.01"]),
             ("FedRecAttack 5%", ["attack=fedrecattack", "attack.participation=every_round"])]


def w10_case(args, case: int) -> tuple[float, float, int]:
    """(s / round, peak GB, malicious clients) of one W10 case."""
    from fedrun.app.plan import build_run

    data = TINY_DATA if args.tiny else ML1M_8020
    clients = 64 if args.tiny else 256
    overrides = data + COMMON + MF + [f"sim.clients_per_round={clients}", "sim.fast_path=off",
                                      f"sim.device={args.device}", *W10_CASES[case][1]]
    built = build_run(compose(overrides))
    reset_peak_rss()
    seconds = time_rounds(built.trainer, args.rounds)
    gpu = peak_gpu_gb(built.env.device)
    return seconds, peak_rss_gb() if gpu is None else gpu, getattr(built.plan.attack, "n_clients", 0)


def bench_w10(args, out: Path) -> str:
    """W0's round on the general path (an attack turns the FedSGD shortcut off) without and with A-hum
    clients (10 synthetic users each, 30 mining steps), each in its own process for its peak RSS."""
    if args.case is not None:
        print(json.dumps(w10_case(args, args.case)))
        return ""
    rows, base = [], None
    for case, (name, _) in enumerate(W10_CASES):
        if args.tiny:  # a smoke test: in this process (its peak RSS is not the case's own)
            seconds, rss, malicious = w10_case(args, case)
        else:
            command = [sys.executable, __file__, *without_workloads(sys.argv[1:]), "--workloads", "w10",
                       "--case", str(case)]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SystemExit(f"W10 case {name} failed:\n{result.stderr[-3000:]}")
            seconds, rss, malicious = json.loads(result.stdout.strip().splitlines()[-1])
        base = base or seconds
        rows.append([name, str(malicious), f"{seconds:.4f}", f"{seconds / base:.2f}×", f"{rss:.2f}"])
    caption = (f"W10 W0's round with malicious clients{' [tiny synthetic]' if args.tiny else ''} (general path, "
               f"{args.rounds} timed rounds after 2 warm-up; A-hum: 10 synthetic users and 30 mining steps per "
               f"malicious client, attack.lr 0.01: at W0's client lr of 10 the mined users diverge; FedRecAttack: "
               f"1% known interactions, one epoch of fitting per round, every client joins every round); "
               f"{machine(args.device)}")
    return write_table(out, "w10", ["W10 case", "malicious clients", "s / round", "vs no attack", "peak RSS GB"],
                       rows, caption)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="w0,w1,w2,w3,w4,w5,w6,w7,w8,w9,w10,w11,w12,w13",
                        help="comma-separated: w0 … w13")
    parser.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)  # W10: one case, in-process
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--loop-rounds", type=int, default=3)
    parser.add_argument("--out", default="outputs/bench")
    parser.add_argument("--tiny", action="store_true", help="every workload on small synthetic data (smoke test)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (sim.device of every workload)")
    args = parser.parse_args()
    os.environ.setdefault("FEDRUN_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workloads = args.workloads.split(",")
    others = {"w4": bench_w4, "w5": bench_w5, "w6": bench_w6, "w7": bench_w7, "w8": bench_w8, "w9": bench_w9,
              "w10": bench_w10, "w11": bench_w11, "w12": bench_w12, "w13": bench_w13}
    unknown = sorted(set(workloads) - {*TRAIN, *others})
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(unknown)}; allowed: {', '.join([*TRAIN, *others])}")
    if len(workloads) > 1 and not args.tiny:  # one process per workload: each peak RSS is its own
        for name in workloads:
            command = [sys.executable, __file__, *without_workloads(sys.argv[1:]), "--workloads", name]
            if subprocess.run(command, check=False).returncode != 0:
                return 1
        return 0
    for name in workloads:  # --tiny (a smoke test): every workload in this process, peak RSS not its own
        print(bench_train(TRAIN[name], args, out) if name in TRAIN else others[name](args, out))
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
