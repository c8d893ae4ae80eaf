"""MLflow tracking: parallel runs on a fresh embedded store."""

from __future__ import annotations

import subprocess
import sys

from mlflow.tracking import MlflowClient

OPEN_AND_START = """
import sys
from fedrun.track.mlflow import Mlflow, MlflowConfig
tracker = Mlflow(MlflowConfig(uri=sys.argv[1], experiment="parallel"))
tracker.start("parallel", "run " + sys.argv[2], {"job": sys.argv[2]}, {})
tracker.finish("FINISHED")
"""


def test_runs_started_together_on_a_fresh_sqlite_store_all_land(tmp_path):
    """Each process opening a new store migrates its schema; unserialized, one dies on 'duplicate column'."""
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    jobs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_START, uri, str(job)], stderr=subprocess.PIPE, text=True)
            for job in range(4)]
    errors = [job.communicate()[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0] * 4, "\n".join(errors)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("parallel").experiment_id])
    assert sorted(run.data.params["job"] for run in runs) == ["0", "1", "2", "3"]
    assert {run.info.status for run in runs} == {"FINISHED"}
