"""The privacy–utility–leakage picture: each family's audited runs grouped by budget, FedGNN's clip-only λ drawn as
no noise, means over the finished seeds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fedrun.app.privacy_leakage import PANELS, draw, points, table


def run(seed: int, scale: float | None, utility: float, leak: float, status: str = "FINISHED") -> dict:
    return {"run_id": f"r{seed}-{scale}", "status": status, "start_time": seed,
            "param:choices.method": "fedgnn", "param:choices.row": "perfedrecpp/fedgnn",
            "param:choices.dataset": "yelp-perfedrec", "param:choices.backbone": "perfedrecpp/lightgcn",
            "param:choices.privacy": "perfedrecpp/ldp", "param:privacy.scale": scale, "param:privacy.clip": 0.5,
            "param:sim.seed": seed, "metric:test_recall_at_20": utility, "metric:audit_shared_recall_at_20": leak,
            "metric:audit_shared_popularity_recall_at_20": 0.025}


def test_the_graph_panel_groups_seeds_by_budget_and_draws_the_clip_only_run_as_no_noise(tmp_path):
    frame = pd.DataFrame([run(1, 0.1, 0.048, 0.06), run(2, 0.1, 0.050, 0.08), run(1, 1e-6, 0.056, 0.36),
                          run(3, 0.1, 0.9, 0.9, status="FAILED")])
    graph = next(panel for panel in PANELS if "FedGNN" in panel.title)
    found = points(frame, graph)
    assert list(found["epsilon"]) == [pytest.approx(10.0), math.inf]  # 2δ/λ per coordinate; λ 1e-6: no noise
    assert found["metric:test_recall_at_20 mean"].iloc[0] == pytest.approx(0.049)
    assert found["metric:audit_shared_recall_at_20 mean"].iloc[0] == pytest.approx(0.07)
    assert list(found["seeds"]) == [2, 1]  # the failed run is not a point
    text = table(frame, graph)
    assert "| ∞ (no noise) | 0.0560 (n = 1)    | 0.3600 (n = 1)    " in text
    assert table(frame, PANELS[0]) == ""  # no FedCL run: no table
    assert draw(frame, tmp_path).exists()
