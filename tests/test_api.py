"""The Python API: ``fedrun.run`` returns what the CLI's run computes, with the per-round history and the floor;
``fedrun.compose`` refuses a misspelt option as the CLI does; the documented example script runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fedrun
from fedrun.app import experiment
from fedrun.errors import ConfigError
from tests.conftest import SMALL, compose_cfg

ROOT = Path(__file__).resolve().parents[1]


def test_run_returns_the_runs_results_history_and_floor():
    overrides = [*SMALL, "sim.epochs=2", "sim.eval_every=1", "track=none"]
    result = fedrun.run(*overrides)
    assert result.test == experiment.run(compose_cfg(overrides)).test  # the CLI's run, nothing else
    assert set(result.floor) == set(result.test) and all(v > 0 for v in result.floor.values())
    assert list(result.history.columns)[0] == "step" and "train_loss" in result.history
    assert result.history["valid_ndcg_at_10"].notna().sum() == 2  # one validation per epoch
    assert not any(c.startswith("floor_") for c in result.history)  # constants are in ``floor``
    assert result.rounds == result.history["step"].max() and result.run_id is None


def test_run_takes_an_edited_config():
    cfg = fedrun.compose(*SMALL, "track=none")
    cfg.sim.epochs = 1
    assert fedrun.run(config=cfg).rounds < fedrun.run(*SMALL, "sim.epochs=2", "track=none").rounds


def test_compose_refuses_a_misspelt_option():
    with pytest.raises(ConfigError, match="closest: fedavg"):
        fedrun.compose("method=fedavgg")


def test_import_fedrun_stays_light():
    code = "import sys, fedrun; print('torch' in sys.modules, 'mlflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() \
        == ["False", "False"]


def test_the_example_script_runs(tmp_path):
    small = [o for o in SMALL if o.startswith(("dataset.", "sim.clients"))]  # its four runs on a small synthetic set
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "examples" / "python_api.py"), *small], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "central" in done.stdout and "fedavg" in done.stdout


def test_every_record_carries_its_epoch_for_a_shared_x_axis():
    """Central runs step once per epoch, federated ones many times: ``epoch`` (step / rounds per epoch) beside every
    record lets MLflow draw a sweep's curves on one axis."""
    for method in ("central", "fedavg"):
        history = fedrun.run(*SMALL, f"method={method}", "sim.epochs=2", "sim.eval_every=1").history
        per_epoch = history["step"].max() / 2
        assert (history["epoch"] == history["step"] / per_epoch).all()
        validated = history.dropna(subset=["valid_ndcg_at_10"])
        assert validated["epoch"].tolist() == [1.0, 2.0]
