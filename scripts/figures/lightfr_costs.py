"""Storage, communication and on-device inference per client (LightFR Table 6 and Fig. 3) from the
tensors the methods actually exchange, beside the paper's formulas.

For each federated row of ``lightfr/table5`` the method is built on the chosen data setup (Ciao
by default: the paper's Fig. 3) and trains one round; the round's mean bytes up / down per
client are what the method accounts for its real uploads and downloads (float32 rows with int32
ids, packed sign codes, Paillier ciphertexts, dense FCF matrices, MetaMF's generated model); a
round of FedRec and PrivRec moves only the rows a client trains on, so ranking on the device
needs the whole item table once more (the storage column). Storage is the client's copy of the
model it ranks with (its user vector + the item table as it holds it; MetaMF: A_u, B_u and its
RP layers). Inference is one client ranking the catalogue for its top k: matmul + topk for
real-valued rows (MetaMF: A_u B_u and its MLP; no index applies), Faiss's binary index for
LightFR; FedMF must first decrypt the item matrix it downloads, timed per value with the row's
key and multiplied by m·f (decrypting 3.4 M values literally would take an hour).

    python scripts/figures/lightfr_costs.py [--setup lightfr/ciao] [--out docs/reproductions/lightfr]   # .md .csv .png
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.build import build  # noqa: E402
from fedrun.app.compose import compose  # noqa: E402
from fedrun.kernels.env import RunEnv  # noqa: E402
from fedrun.method.base import Method  # noqa: E402
from fedrun.method.fedmf import FedMF  # noqa: E402
from fedrun.method.lightfr import LightFR  # noqa: E402
from fedrun.method.metamf import MetaMF, generate, head, predict  # noqa: E402
from fedrun.retrieval.hamming import pack_codes, top_k_hamming  # noqa: E402
from fedrun.sim.trainer import trainer_for  # noqa: E402

ROWS = ("fcf", "fedmf", "fedrec", "metamf", "privrec", "lightfr")


def build_method(setup: str, row: str):
    from fedrun.app.plan import plan

    cfg = compose(["+experiment=lightfr/table5", f"setup={setup}", f"row=lightfr/{row}", "track=none",
                   "sim.progress=false"])
    p = plan(cfg)
    env = RunEnv.create(p.dataset.load(), p.sim, p.backbone)
    return trainer_for(build(cfg.method, "method", Method, env=env), p.privacy, p.attack, p.defense, p.sim)


def median_ms(fn, repeats: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def storage_bytes(method: Method) -> float:
    """The client's model copy: its user vector and the item table it ranks with."""
    item = method.public.item
    if isinstance(method, LightFR):  # packed sign codes
        return (item.shape[0] + 1) * method.env.backbone.code_bytes()
    if isinstance(method, MetaMF):  # its generated model: A_u, B_u and the RP layers (float32)
        return 4.0 * method.model_floats()
    return (item.shape[0] + 1) * item.shape[1] * item.element_size()  # FedMF: V after decryption


def inference_ms(method: Method, k: int = 10) -> tuple[float, float, float]:
    """(torch ms, Faiss ms, decryption ms) for one client's top k over the catalogue; the index is
    built once, as a client would keep it between queries."""
    import faiss
    import numpy as np

    item, user = method.public.item, method.client.private.user[:1]
    if isinstance(method, MetaMF):  # U_u = A_u B_u, then the RP MLP over the catalogue; no index applies
        dim, s, m = method.env.backbone.config.dim, method.config.item_factors, method.env.n_items
        with torch.no_grad():
            model = generate(method.public.net, torch.tensor([0]), dim, s)
            left = head(method.public.net, "items.left", model["h_items"]).view(1, m, s)
        return median_ms(lambda: predict(model, left).topk(k, dim=1)), float("nan"), 0.0
    if isinstance(method, LightFR):
        codes, query = pack_codes(item), pack_codes(user)
        index = faiss.IndexBinaryFlat(item.shape[1])
        index.add(codes.numpy())
        return (median_ms(lambda: top_k_hamming(query, codes, k, engine="torch")),
                median_ms(lambda: index.search(query.numpy(), k)), 0.0)
    index = faiss.IndexFlatIP(item.shape[1])
    index.add(np.ascontiguousarray(item.detach().numpy()))
    query = np.ascontiguousarray(user.detach().numpy())
    torch_ms = median_ms(lambda: (user @ item.T).topk(k, dim=1))
    faiss_ms = median_ms(lambda: index.search(query, k))
    if not isinstance(method, FedMF):
        return torch_ms, faiss_ms, 0.0
    cipher = [method.keys.public.encrypt(0.01 * i) for i in range(20)]
    started = time.perf_counter()
    for value in cipher:
        method.keys.private.decrypt(value)
    per_value = (time.perf_counter() - started) / len(cipher)
    return torch_ms, faiss_ms, 1e3 * per_value * item.numel()


def paper_formulas(method: Method, row: str, rated: float) -> tuple[float, float]:
    """LightFR Table 6 exactly as printed: (storage, communication) bytes with m items, f the row's
    width (32 for the real-valued rows, 64 for LightFR) and I_u the client's rated items. Real values
    count 64 bits (1,024 for FedMF's ciphertexts); LightFR's formula counts f bytes per code."""
    m, f = method.env.n_items, method.env.backbone.config.dim
    if row == "lightfr":
        return (1 + m) * f, (rated + m) * f
    if row == "metamf":  # L = 2 layers, h = 8 hidden units, s = 8 [Table 4]
        layers, hidden, s = 2, 8, 8
        return (m + layers * hidden) * f * 8, (m * f + 2 * layers * hidden + f * s + s * m) * 8
    bits = 1024 if row == "fedmf" else 64
    sent = rated * (1 + method.config.rho) if row == "fedrec" else rated
    return (1 + m) * f * bits / 8, (sent + m) * f * bits / 8


def cost_row(row: str, method: Method, stats, rated: float) -> dict[str, float]:
    torch_ms, faiss_ms, decrypt_ms = inference_ms(method)
    formula_storage, formula_comm = paper_formulas(method, row, rated)
    return {"row": row, "items": method.env.n_items, "rated_per_client": rated,
            "storage_bytes": storage_bytes(method), "download_bytes": stats.bytes_down,
            "upload_bytes": stats.bytes_up, "comm_bytes": stats.bytes_down + stats.bytes_up,
            "paper_storage_bytes": formula_storage, "paper_comm_bytes": formula_comm,
            "top10_torch_ms": torch_ms, "top10_faiss_ms": faiss_ms, "decrypt_ms": decrypt_ms}


def markdown(rows: list[dict[str, float]]) -> str:
    """The table with LightFR's share of each row's storage and traffic (measured and by formula)."""
    light = next(r for r in rows if r["row"] == "lightfr")
    for r in rows:
        for key in ("storage_bytes", "comm_bytes", "paper_storage_bytes", "paper_comm_bytes"):
            r[f"lightfr_share_{key.removesuffix('_bytes')}"] = light[key] / r[key]
    columns = list(rows[0])

    def cell(key: str, value) -> str:
        if isinstance(value, str):
            return value
        if key.startswith("lightfr_share"):
            return f"{value:.1%}"
        if key.endswith("_ms"):
            return "–" if value != value else f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"

    header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return header + "".join("| " + " | ".join(cell(k, r[k]) for k in columns) + " |\n" for r in rows)


def plot(rows: list[dict[str, float]], title: str, path: Path) -> None:
    """LightFR's Fig. 3: storage, communication per round and top-10 time per client, one bar per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["row"] for r in rows]
    panels = (("storage_bytes", "storage (bytes)"), ("comm_bytes", "traffic per round (bytes)"),
              ("top10_torch_ms", "top-10 time, torch (ms)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (key, label) in zip(axes, panels):
        ax.bar(names, [r[key] for r in rows], color=["tab:red" if n == "lightfr" else "tab:blue" for n in names])
        ax.set_yscale("log")
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="lightfr/ciao")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions" / "lightfr")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for row in ROWS:
        rounds = build_method(args.setup, row)
        stats = rounds.train_round(0)
        rated = float(rounds.method.env.train.sizes(rounds.sampler.users(0)).double().mean())
        rows.append(cost_row(row, rounds.method, stats, rated))
        print(rows[-1], flush=True)
    table = markdown(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"costs-{args.setup.split('/')[-1]}"
    with open(stem.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    note = (f"Per client, one round of each row on {args.setup}: bytes as the methods account their real "
            f"uploads and downloads; top-10 over the catalogue, median of 20; {platform.machine()}, "
            f"torch {torch.__version__}, 1 thread. `python scripts/figures/lightfr_costs.py --setup {args.setup}`\n\n")
    stem.with_suffix(".md").write_text(note + table)
    plot(rows, f"LightFR Fig. 3 on {args.setup}: per client", stem.with_suffix(".png"))
    print(table)
    print(f"wrote {stem}.md, .csv and .png")


if __name__ == "__main__":
    main()
