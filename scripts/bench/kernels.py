"""Kernel workloads: W7 (FedCL's server reclustering: faiss pre-aggregation against scikit-learn), W9 (the
robust aggregation rules on one W0 round's uploads), W12 (the graph product's backward through the
prebuilt transpose against autograd's)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import COMMON, GOWALLA, MF, ML1M_8020, TINY_DATA, build_method, memory_note, write_table

from fedrun.testing.measure import machine, sync
from fedrun.types import Uploads

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
        rule = build_method(data + COMMON + MF + [override, f"sim.clients_per_round={clients}"])[0].defense
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
