"""The shared tracking server (issue #64, item 3): ``fedrun-tracking-server`` starts PostgreSQL and ``mlflow server``
on loopback, a run records to it and prints its page on that server, a wrong password is one named line, and a
restarted server still holds every run. `make install` installs PostgreSQL and its driver; without them the test
says so and skips."""

from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fedrun.app import tracking_server

FEDRUN = shutil.which("fedrun") or str(Path(sys.executable).parent / "fedrun")
QUICK = ["method=fedavg", "dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "sim.epochs=1",
         "sim.clients_per_round=16", "sim.progress=false"]

pytestmark = pytest.mark.skipif(
    not (glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb")),
    reason="PostgreSQL is not installed (`make install` installs it as root with apt-get)")


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("psycopg", reason="PostgreSQL's driver: `make install` installs it (fedrun[tracking])")
    root = Path(tempfile.mkdtemp(prefix="fedrun-tracking-"))  # not under pytest's tmp: postgres must enter it
    root.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    try:
        yield root, tracking_server.start(root / "tracking", tracking_server.free_port())
    finally:
        tracking_server.stop(root / "tracking")
        shutil.rmtree(root, ignore_errors=True)


def fedrun(tmp_path, uri, *args):
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    return subprocess.run([FEDRUN, *QUICK, *args], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_a_run_records_to_the_server_and_a_restart_keeps_it(server, tmp_path):
    root, state = server
    result = fedrun(tmp_path, state.uri, "track.experiment=shared")
    assert result.returncode == 0, result.stderr[-2000:]
    client = MlflowClient(state.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("shared").experiment_id])
    assert run.info.status == "FINISHED"
    assert f"{state.uri}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}" in result.stdout
    assert "last_run.md" in {a.path for a in client.list_artifacts(run.info.run_id)}  # through the server's proxy

    assert tracking_server.stop(root / "tracking")
    restarted = tracking_server.start(root / "tracking", None)
    assert restarted.uri == state.uri  # the same ports: the URI users exported still works
    (again,) = MlflowClient(state.uri).search_runs([run.info.experiment_id])
    assert again.info.run_id == run.info.run_id and again.data.metrics == run.data.metrics


def test_a_wrong_database_password_is_one_named_line(server, tmp_path):
    _, state = server
    uri = state.backend().replace("fedrun@", "fedrun:wrong@").replace("+psycopg", "")
    result = fedrun(tmp_path, uri)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "password authentication failed" in result.stderr and "wrong" not in result.stderr
