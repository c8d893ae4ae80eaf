"""Metric names as MLflow shows them: grouped by what they measure.

MLflow's run page draws one section of charts per prefix before a ``/``. fedrun computes, tabulates and ledgers its
metrics under flat names (``test_ndcg_at_10``, ``floor_hr_at_10``, ``bytes_up_per_client``); at the MLflow boundary a
flat name becomes ``<group>/<leaf>`` (``test/ndcg_at_10``, ``floor/hr_at_10``, ``cost/bytes_up_per_client``), so a
run opens on sections — train, valid, test, attack, floor, privacy, audit, cost — rather than one alphabetical list
with the single-point floors ahead of the training curve. Reading goes the other way (``flat``), and a run recorded
before the grouping (no ``/`` in its names) reads unchanged: reports, ledgers and figures see flat names from either.

A name no rule covers (``epoch``, a plugin's own metric) is logged as it is.
"""

from __future__ import annotations

from typing import Any

# flat prefix → grouped prefix. The most specific prefix wins (longest first), so ``test_er_at_5`` is an attack's
# measure before it is a test metric, and ``floor_valid_ndcg_at_10`` a floor before a validation metric.
GROUPS: dict[str, str] = {
    "train_loss": "train/loss",
    "rounds_trained": "train/rounds",
    "update_norm_": "train/update_norm_",
    "item_uniformity": "train/item_uniformity",
    "item_bits_flipped": "train/item_bits_flipped",
    "cluster_size_": "train/cluster_size_",
    "best_valid_": "valid/best_",
    "valid_": "valid/",
    "test_er_": "attack/test_er_",  # the targets' exposure at test time (and per target: ``_item<id>``)
    "test_target_": "attack/test_target_",
    "target_": "attack/target_",  # the attackers' share of the target's uploads
    "synthetic_": "attack/synthetic_",
    "test_": "test/",
    "floor_": "floor/",  # the popularity floor of the split and protocol, one point per run
    "dp_": "privacy/dp_",
    "epsilon_": "privacy/epsilon_",
    "clipped_fraction": "privacy/clipped_fraction",
    "audit_": "audit/",
    "bytes_": "cost/bytes_",
    "comm_": "cost/comm_",
    "seconds_per_": "cost/seconds_per_",
    "train_seconds": "cost/train_seconds",
    "eval_seconds": "cost/eval_seconds",
    "cluster_seconds_": "cost/cluster_seconds_",
    "encryption_seconds_": "cost/encryption_seconds_",
    "dcd_sweeps_": "cost/dcd_sweeps_",
}
_BY_FLAT = sorted(GROUPS.items(), key=lambda rule: -len(rule[0]))
_BY_GROUPED = sorted(GROUPS.items(), key=lambda rule: -len(rule[1]))


def grouped(name: str) -> str:
    """The name MLflow records for the flat metric ``name`` (``test_ndcg_at_10`` → ``test/ndcg_at_10``)."""
    for flat_prefix, grouped_prefix in _BY_FLAT:
        if name.startswith(flat_prefix):
            return grouped_prefix + name[len(flat_prefix):]
    return name


def flat(name: str) -> str:
    """The flat name of a recorded metric: the one ``grouped`` maps to ``name`` (a flat name reads as itself)."""
    for flat_prefix, grouped_prefix in _BY_GROUPED:
        if name.startswith(grouped_prefix):
            candidate = flat_prefix + name[len(grouped_prefix):]
            if grouped(candidate) == name:
                return candidate
    return name


def run_metrics(run: Any) -> dict[str, float]:
    """An MLflow run's latest metrics under their flat names, whichever way it recorded them."""
    return {flat(key): value for key, value in run.data.metrics.items()}


def recorded(run: Any, name: str) -> str:
    """The key under which ``run`` recorded the flat metric ``name``: grouped, or flat in a run from before the
    grouping (the grouped key when it recorded neither, which reads as an empty history)."""
    return name if name in run.data.metrics and grouped(name) not in run.data.metrics else grouped(name)


def history(client: Any, run: Any, name: str) -> list:
    """The history (MLflow ``Metric`` points) of the flat metric ``name`` in ``run``."""
    return client.get_metric_history(run.info.run_id, recorded(run, name))
