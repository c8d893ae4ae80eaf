"""Metric names at the MLflow boundary: grouped into sections for the run page, flat again for every reader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedrun.store.metric_names import GROUPS, flat, grouped, history, recorded, run_metrics

# every name the runs in this project's store recorded (outputs/mlflow.db, 2026-11-30), and the curve names
LOGGED = """audit_auc audit_base_rate audit_clients audit_intersect_precision audit_intersect_recall
audit_round_precision audit_round_recall audit_shared_clients audit_shared_popularity_recall_at_20
audit_shared_random_recall_at_20 audit_shared_recall_at_20 best_valid_recall_at_20 best_valid_round
bytes_down_per_client bytes_up_per_client clipped_fraction cluster_seconds_total cluster_size_max cluster_size_min
comm_bytes_client comm_bytes_denoiser comm_bytes_ordinary comm_vectors_client comm_vectors_denoiser
comm_vectors_ordinary dcd_sweeps_user dp_delta dp_epsilon_spent_max encryption_seconds_per_client epoch
epsilon_item_rows_round_max epsilon_item_rows_spent_max epsilon_per_item_row epsilon_spent_max eval_seconds
floor_hr_at_10 floor_mae floor_ndcg_at_10 floor_rmse floor_valid_hr_at_10 floor_valid_ndcg_at_20 item_bits_flipped
item_uniformity rounds_trained seconds_per_epoch seconds_per_round synthetic_fit_loss synthetic_item_share
target_share_malicious target_uploads_benign target_uploads_malicious test_er_at_10 test_er_at_10_item1805
test_er_at_5 test_er_at_5_item4739 test_hr_at_10 test_mae test_mrr_at_10 test_ndcg_at_10 test_precision_at_20
test_recall_at_20 test_rmse test_target_ndcg_at_10 train_loss train_seconds update_norm_mean valid_er_at_5
valid_hr_at_10 valid_ndcg_at_20 valid_recall_at_20""".split()


@pytest.mark.parametrize("name", LOGGED)
def test_every_logged_name_reads_back_as_itself(name):
    assert flat(grouped(name)) == name
    assert flat(name) == name  # a run recorded before the grouping reads unchanged


def test_no_two_names_share_a_recorded_name():
    assert len({grouped(name) for name in LOGGED}) == len(LOGGED)


@pytest.mark.parametrize("name, shown", [
    ("test_ndcg_at_10", "test/ndcg_at_10"), ("valid_recall_at_20", "valid/recall_at_20"),
    ("best_valid_round", "valid/best_round"), ("floor_valid_ndcg_at_10", "floor/valid_ndcg_at_10"),
    ("test_er_at_5", "attack/test_er_at_5"), ("train_loss", "train/loss"), ("audit_auc", "audit/auc"),
    ("bytes_up_per_client", "cost/bytes_up_per_client"), ("epsilon_spent_max", "privacy/epsilon_spent_max"),
    ("epoch", "epoch"), ("my_plugin_metric", "my_plugin_metric")])
def test_a_metric_lands_in_the_section_of_what_it_measures(name, shown):
    assert grouped(name) == shown


def test_every_group_is_a_section_and_every_rule_is_reachable():
    assert {prefix.split("/")[0] for prefix in GROUPS.values()} == {
        "train", "valid", "test", "attack", "floor", "privacy", "audit", "cost"}
    for flat_prefix, grouped_prefix in GROUPS.items():  # no longer prefix shadows a rule
        assert grouped(flat_prefix + "x") == grouped_prefix + "x"


def test_readers_find_a_metric_under_either_recording():
    points = {"run-new": {"test/ndcg_at_10": [1.0]}, "run-old": {"test_ndcg_at_10": [2.0]}}
    client = SimpleNamespace(get_metric_history=lambda run_id, key: points[run_id].get(key, []))
    new = SimpleNamespace(info=SimpleNamespace(run_id="run-new"), data=SimpleNamespace(metrics={"test/ndcg_at_10": 1}))
    old = SimpleNamespace(info=SimpleNamespace(run_id="run-old"), data=SimpleNamespace(metrics={"test_ndcg_at_10": 2}))
    assert history(client, new, "test_ndcg_at_10") == [1.0] and history(client, old, "test_ndcg_at_10") == [2.0]
    assert run_metrics(new) == {"test_ndcg_at_10": 1} and run_metrics(old) == {"test_ndcg_at_10": 2}
    assert recorded(old, "valid_ndcg_at_10") == "valid/ndcg_at_10"  # neither recorded: an empty history
