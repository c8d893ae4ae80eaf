"""Evaluation workloads: W4 (full ranking of every test user against a bare matmul + top-k), W8 (NeuMF
full ranking in cache-sized blocks against one pass)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import GOWALLA, TINY_DATA, peak_gpu_gb, reset_peak_rss, write_table

from fedrun.app.build import build
from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.eval.base import Evaluator
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.testing.measure import machine, peak_rss_gb, sync

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
            (method.client.private.user[part] @ method.public.item.T).topk(k, dim=1)
    sync(env.device)
    t_floor = time.perf_counter() - started
    gpu = peak_gpu_gb(env.device)
    return [name, f"{users.numel():,}", f"{env.n_items:,}", f"{t_eval:.2f}", f"{t_floor:.2f}",
            f"{t_eval / t_floor:.2f}×", f"{peak_rss_gb():.2f}", "" if gpu is None else f"{gpu:.2f}"]


W8_SIZES = {"ml-1m": (6040, 3416), "beauty": (22363, 12101)}  # users, items (FedCL's LOO splits)


def bench_w8(args, out: Path) -> str:
    from fedrun.backbone.config import NCFConfig
    from fedrun.backbone.ncf import NCF

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
