"""What a robust rule does to an item row's uploads: the analyses behind the notes on Median's cost and on the
attacks' target rows (``scripts/investigations/median_rows.py``, ``target_row_uploads.py``) and the round's
per-round count of the watched targets' uploads (``target_uploads``). They read a round's uploads beside the
simulation's own bookkeeping (who sent what, the clients' training data); no server-side code calls them."""

from __future__ import annotations

import torch

from fedrun.defense._rows import stack_rows
from fedrun.defense.config import TrimmedMeanConfig
from fedrun.defense.median import coordinate_median
from fedrun.defense.trimmed_mean import TrimmedMean
from fedrun.types import RoundContext, Uploads

QUANTILES = (0.5, 0.9, 0.99)
TRIMMED = TrimmedMean(TrimmedMeanConfig(beta=0.1))  # the matrix's trimmed mean (its reduce: one row group)


def mean_pairwise_cosine(rows: torch.Tensor) -> float:
    """rows [n, d] → the mean cosine over distinct pairs (nan below two rows)."""
    if rows.shape[0] < 2:
        return float("nan")
    unit = torch.nn.functional.normalize(rows, dim=1)
    gram = unit @ unit.T
    n = rows.shape[0]
    return float((gram.sum() - gram.diagonal().sum()) / (n * (n - 1)))


def target_uploads(benign: Uploads, crafted: Uploads | None, targets: torch.Tensor) -> dict[str, float]:
    """One round's uploads of the watched target rows (``targets`` [T]): how many rows the benign clients and the
    attack's clients sent for them, and the attack's share of them — the weight it has in what a per-row rule
    aggregates for its targets (#62's regime axis). The simulation's bookkeeping: it knows who is malicious."""
    benign_rows = int(torch.isin(benign.row_item, targets).sum())
    malicious_rows = 0 if crafted is None else int(torch.isin(crafted.row_item, targets).sum())
    out = {"target_uploads_benign": float(benign_rows), "target_uploads_malicious": float(malicious_rows)}
    if benign_rows + malicious_rows:
        out["target_share_malicious"] = malicious_rows / (benign_rows + malicious_rows)
    return out


def target_row_record(uploads: Uploads, ctx: RoundContext, target: int) -> dict[str, float]:
    """One round's uploads of the attacked item's row ``target``: benign and malicious uploaders (the attack's
    clients join after the round's ``ctx.n_clients`` benign ones), their norms and agreement, the push each rule
    gives the row along the attack's direction (sum, median and trimmed mean, each × uploaders), and the row-norm
    quantiles that put a norm bound's τ on the uploads' scale."""
    malicious_row = uploads.row_client >= ctx.n_clients  # the attack's clients join after the benign ones
    norms = uploads.row_delta.norm(dim=1)
    on_target = uploads.row_item == target
    benign, bad = uploads.row_delta[on_target & ~malicious_row], uploads.row_delta[on_target & malicious_row]
    everyone = uploads.row_delta[on_target]  # [n, d]
    out = {"round": ctx.round, "benign uploaders": benign.shape[0], "malicious uploaders": bad.shape[0],
           "benign target norm": float(benign.norm(dim=1).median()) if benign.shape[0] else float("nan"),
           "malicious target norm": float(bad.norm(dim=1).median()) if bad.shape[0] else float("nan"),
           "malicious cosine": mean_pairwise_cosine(bad)}
    if bad.shape[0] and benign.shape[0]:
        out["cos(malicious mean, benign mean)"] = float(torch.nn.functional.cosine_similarity(
            bad.mean(0), benign.mean(0), dim=0))
    if bad.shape[0]:
        direction = torch.nn.functional.normalize(bad.mean(0), dim=0)
        n = everyone.shape[0]
        out["push sum"] = float(everyone.sum(0) @ direction)
        out["push malicious only"] = float(bad.sum(0) @ direction)
        out["push median"] = float(n * coordinate_median(everyone.unsqueeze(0))[0] @ direction)
        out["push trimmed mean"] = float(n * TRIMMED.reduce(everyone.unsqueeze(0))[0] @ direction)
    for q in QUANTILES:
        out[f"benign row norm q{q}"] = float(norms[~malicious_row].quantile(q))
        if bool(malicious_row.any()):
            out[f"malicious row norm q{q}"] = float(norms[malicious_row].quantile(q))
    return out


def row_positives(uploads: Uploads, senders: torch.Tensor, train_keys: torch.Tensor, n_items: int) -> torch.Tensor:
    """[R] whether each uploaded row's sender holds its item in training (``train_keys``: sorted user·I + item)."""
    keys = senders[uploads.row_client] * n_items + uploads.row_item  # [R]
    at = torch.searchsorted(train_keys, keys).clamp_max(train_keys.numel() - 1)
    return train_keys[at] == keys


def median_rows_record(uploads: Uploads, senders: torch.Tensor, train_keys: torch.Tensor, n_items: int,
                       min_uploaders: int) -> list[dict[str, float | int | str]]:
    """Per class of row (positives a minority or not) among the rows with at least ``min_uploaders`` uploaders:
    rows, mean positive share, cosine of the median with the mean and the median's norm over the mean's."""
    positive = row_positives(uploads, senders, train_keys, n_items).to(uploads.row_delta.dtype)  # [R]
    _, _, stacks = stack_rows(uploads.row_item, torch.cat([uploads.row_delta, positive[:, None]], 1))
    shares, cosines, ratios = [], [], []
    for stack in stacks:
        if stack.count < min_uploaders:
            continue
        deltas = stack.values[:, :, :-1]  # [g, c, d]
        shares.append(stack.values[:, :, -1].mean(1))  # [g]
        median, mean = coordinate_median(deltas), deltas.mean(1)  # [g, d]
        cosines.append(torch.nn.functional.cosine_similarity(median, mean, dim=1))
        ratios.append(median.norm(dim=1) / mean.norm(dim=1).clamp_min(1e-30))
    if not shares:
        return []
    share, cosine, ratio = torch.cat(shares), torch.cat(cosines), torch.cat(ratios)
    out: list[dict[str, float | int | str]] = []
    for name, chosen in [("positives a minority", share < 0.5), ("positives at least half", share >= 0.5)]:
        if bool(chosen.any()):
            out.append({"rows": int(chosen.sum()), "positive share": float(share[chosen].mean()),
                        "cos(median, mean)": float(cosine[chosen].mean()),
                        "|median| / |mean|": float(ratio[chosen].median()), "class": name})
    return out
