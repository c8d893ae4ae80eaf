"""fedrun/app/attack_curves.py: per-epoch curves from MLflow histories, one line per attack or per value of a
swept parameter (rCL4FedRec's Fig. 3: one line per α), mean over seeds."""

from __future__ import annotations

import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from fedrun.app.attack_curves import histories, summary


def record(client: MlflowClient, experiment_id: str, params: dict, er_per_epoch: list[float],
           rounds_per_epoch: int = 24) -> None:
    run = client.create_run(experiment_id)
    metrics = [Metric("valid_er_at_5", value, 0, rounds_per_epoch * epoch)
               for epoch, value in enumerate(er_per_epoch, 1)]
    client.log_batch(run.info.run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()],
                     tags=[RunTag("fedrun.attack", "a_hum"), RunTag("fedrun.defense", "sum"),
                           RunTag("fedrun.dataset", "ml-1m")])
    client.set_terminated(run.info.run_id, "FINISHED")


@pytest.fixture
def fig3():
    client = MlflowClient()
    experiment_id = client.create_experiment("fig3")
    record(client, experiment_id, {"method.uniformity_alpha": "0.0", "sim.seed": "1"}, [0.0, 0.2, 1.0])
    record(client, experiment_id, {"method.uniformity_alpha": "0.0", "sim.seed": "2"}, [0.0, 0.4, 0.5])
    record(client, experiment_id, {"method.uniformity_alpha": "1.0", "sim.seed": "1"}, [0.1, 0.9, 1.0])
    record(client, experiment_id, {"sim.seed": "1"}, [0.5, 0.5, 0.5])  # a run that did not sweep α
    return client, experiment_id


def test_one_line_per_value_of_the_swept_parameter_averaged_over_seeds(fig3):
    client, experiment_id = fig3
    table = summary(histories(client, experiment_id, ["valid_er_at_5"], by="method.uniformity_alpha"))
    assert sorted(table["attack"].unique()) == ["method.uniformity_alpha=0.0", "method.uniformity_alpha=1.0"]
    alpha0 = table[table["attack"] == "method.uniformity_alpha=0.0"].set_index("epoch")
    assert list(alpha0.index) == [1, 2, 3]  # the first point (round 24) is the end of epoch 1
    assert alpha0.loc[2, "mean"] == pytest.approx(0.3) and alpha0.loc[3, "count"] == 2
    assert table[table["attack"] == "method.uniformity_alpha=1.0"]["count"].max() == 1


def test_without_by_the_lines_are_the_attacks(fig3):
    client, experiment_id = fig3
    table = summary(histories(client, experiment_id, ["valid_er_at_5"]))
    assert list(table["attack"].unique()) == ["a_hum"]
    assert table.set_index("epoch").loc[1, "count"] == 4
