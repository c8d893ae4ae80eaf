"""The ``track=mlflow`` option: one run recorded in MLflow, with an embedded SQLite store under ``outputs/``
by default.

``MLFLOW_TRACKING_URI`` (or ``track.uri``) points at a team server instead. Per-round
metrics are buffered and sent with ``log_batch`` (each SQLite call costs milliseconds);
names never contain ``@`` (``ndcg_at_10``). A failed or interrupted run ends FAILED or
KILLED with the reason in the ``fedrun.failure_reason`` tag; resuming it moves that reason to
``fedrun.earlier_stops`` (oldest first), so a run that then finishes carries no failure reason.
The store library it uses (and sweeps, reports and scripts use) is ``fedrun.store``.
"""

from __future__ import annotations

import fcntl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.errors import check
from fedrun.store import metric_names as names
from fedrun.store.calls import REOPEN_HINT, close_reads_cut_short, store_call
from fedrun.store.liveness import SWEEP_OWNER, owner_tags
from fedrun.store.runs import (
    CHECKPOINT_DIR,
    EARLIER_STOPS,
    FAILURE_REASON,
    MAX_BATCH,
    MAX_PARAMS,
    RESUMES,
    RESUMES_FILE,
    SWEEP_PARENTS,
    check_experiment_name,
    check_store,
    default_uri,
    end_abandoned_runs,
    experiment_id,
    hide_password,
    open_client,
)
from fedrun.track.base import Tracker


@dataclass
class MlflowConfig:
    uri: str | None = None  # tracking URI; default $MLFLOW_TRACKING_URI or sqlite:///outputs/mlflow.db
    experiment: str | None = None  # default: the experiment preset's name, else the dataset's
    flush_every: int = 200  # buffered metric values before a log_batch call
    process: bool = True  # a single run from the command line records from a second process (fedrun.track.recorder)

    def __post_init__(self) -> None:
        check(self.flush_every >= 1, "flush_every", self.flush_every, "an integer >= 1")
        check_experiment_name("track.experiment", self.experiment)



class Mlflow(Tracker):
    Config = MlflowConfig

    def __init__(self, config: MlflowConfig):
        super().__init__(config)
        self.uri = config.uri or default_uri()
        check_store(self.uri, "track.uri" if config.uri else "MLFLOW_TRACKING_URI")  # before any data is read
        self.client = None
        self._run_id: str | None = None
        self.experiment_id: str | None = None
        self._buffer: list[Any] = []

    def start(self, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        from mlflow.entities import Param

        with store_call(self.uri, "creating the run", hint="Nothing was trained."):
            self.client = self._client()
            self.experiment_id = experiment_id(self.client, experiment)
            end_abandoned_runs(self.client, self.experiment_id)
            run = self.client.create_run(self.experiment_id, run_name=run_name,
                                         tags={"mlflow.runName": run_name, **tags, **owner_tags()})
            self._run_id = run.info.run_id
            items = [Param(k, str(v)[:6000]) for k, v in params.items()]
            for start in range(0, len(items), MAX_PARAMS):
                self.client.log_batch(self._run_id, params=items[start:start + MAX_PARAMS])

    def sweep_parent(self, experiment: str, sweep_dir: str, overrides: list[str]) -> str | None:
        """One parent run per (sweep folder, experiment), its id kept in ``<sweep>/.fedrun-parents.json`` under a
        lock (parallel jobs start together). The parent holds the sweep's overrides, and for a resumed search the
        folder of the sweep it continues (``fedrun.resumes``); ``StopOnSignal`` ends it."""
        import json

        registry = Path(sweep_dir) / SWEEP_PARENTS
        registry.parent.mkdir(parents=True, exist_ok=True)
        with open(registry.with_suffix(".lock"), "w") as lock, store_call(self.uri, "creating the sweep's run"):
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = json.loads(registry.read_text()) if registry.exists() else {}
            if experiment not in known:
                client = self._client()
                name = f"sweep {Path(sweep_dir).name}"
                owner = Path(sweep_dir) / SWEEP_OWNER  # the Hydra parent, which outlives every job
                resumes = Path(sweep_dir) / RESUMES_FILE  # a resumed search: the sweep it continues
                run = client.create_run(experiment_id(client, experiment), run_name=name,
                                        tags={"mlflow.runName": name, "fedrun.kind": "sweep",
                                              "fedrun.sweep": str(sweep_dir),
                                              **({RESUMES: resumes.read_text().strip()} if resumes.exists() else {}),
                                              **(json.loads(owner.read_text()) if owner.exists() else {})})
                client.log_param(run.info.run_id, "overrides", " ".join(overrides)[:6000])
                known[experiment] = {"run_id": run.info.run_id, "uri": self.uri}
                registry.write_text(json.dumps(known))
            return known[experiment]["run_id"]

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def _client(self):
        if self.client is None:
            self.client = open_client(self.uri)
        return self.client

    def resume(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        with store_call(self.uri, "reopening the run to resume it", hint=REOPEN_HINT):
            client = self._client()
            try:
                run = client.get_run(run_id)
            except MlflowException as err:
                if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise  # a store that fails is not a run that is gone
                return False
            if run.info.status == "FINISHED":
                return False  # never reopened: its results stay as recorded, the continuation is a new run
            client.update_run(run_id, status="RUNNING")
            tags = {"fedrun.resumed": "true", **owner_tags()}
            stop = run.data.tags.get(FAILURE_REASON)
            if stop:  # it runs again: the stop is history, not the reason a finished run failed
                earlier = run.data.tags.get(EARLIER_STOPS)
                tags[EARLIER_STOPS] = (stop if not earlier else f"{earlier}\n{stop}")[-5000:]
                client.delete_tag(run_id, FAILURE_REASON)
            for key, value in tags.items():
                client.set_tag(run_id, key, value)
        self._run_id, self.experiment_id = run_id, run.info.experiment_id
        return True

    def fetch_checkpoint(self, run_id: str) -> Path:
        import tempfile

        from mlflow.exceptions import MlflowException

        from fedrun.errors import ConfigError

        try:
            local = self._client().download_artifacts(run_id, f"{CHECKPOINT_DIR}/checkpoint.pt",
                                                      tempfile.mkdtemp(prefix="fedrun-resume-"))
        except (MlflowException, OSError):
            raise ConfigError("sim.resume", run_id, f"a checkpoint path, or the id of an MLflow run in {self.uri} "
                              "that logged a checkpoint") from None
        return Path(local)

    def log_checkpoint(self, path: Path) -> None:
        if self.client is not None and self._run_id is not None:
            with store_call(self.uri, "storing the checkpoint"):
                self.client.log_artifact(self._run_id, str(path), CHECKPOINT_DIR)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._buffered(metrics, step, int(time.time() * 1000))
        if len(self._buffer) >= self.config.flush_every:
            self.flush()

    def log_logged(self, logged: list[tuple[dict[str, float], int, int]]) -> None:
        """Metrics logged earlier in another process (``fedrun.track.recorder``), each with its step and the time
        it was logged (ms): all buffered, then sent."""
        for metrics, step, logged_ms in logged:
            self._buffered(metrics, step, logged_ms)
        self.flush()

    def _buffered(self, metrics: dict[str, float], step: int, logged_ms: int) -> None:
        from mlflow.entities import Metric

        self._buffer.extend(Metric(names.grouped(k), float(v), logged_ms, step) for k, v in metrics.items())

    def flush(self) -> None:
        if self._run_id is None or not self._buffer:
            return
        with store_call(self.uri, "logging metrics"):
            for start in range(0, len(self._buffer), MAX_BATCH):
                self.client.log_batch(self._run_id, metrics=self._buffer[start:start + MAX_BATCH])
        self._buffer = []

    def log_artifact(self, path: Path) -> None:
        if self._run_id is not None:
            with store_call(self.uri, f"storing {path.name}"):
                self.client.log_artifact(self._run_id, str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        with store_call(self.uri, "setting tags"):
            for key, value in tags.items() if self._run_id is not None else ():
                self.client.set_tag(self._run_id, key, value)

    def metric_history(self, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
        if self._run_id is None:
            return {}
        self.flush()
        with store_call(self.uri, "reading the metric history"):
            run = self.client.get_run(self._run_id)
            return {key: [(m.step, m.value) for m in sorted(names.history(self.client, run, key), key=lambda m: m.step)]
                    for key in keys if names.recorded(run, key) in run.data.metrics}

    def log_dataset(self, name: str, digest: str, source: str, profile: dict[str, Any]) -> None:
        if self._run_id is None:
            return
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=name, digest=digest[:36], source_type="local", source=json.dumps({"uri": source}),
                          profile=json.dumps(profile))
        with store_call(self.uri, "recording the dataset"):
            self.client.log_inputs(self._run_id, datasets=[
                DatasetInput(dataset, tags=[InputTag(key="mlflow.data.context", value="training")])])

    def log_table(self, columns: dict[str, list], name: str) -> None:
        if self._run_id is None:
            return
        import pandas as pd

        with store_call(self.uri, f"storing the table {name}"):
            self.client.log_table(self._run_id, data=pd.DataFrame(columns), artifact_file=name)

    def finish(self, status: str, reason: str | None = None) -> None:
        if self._run_id is None:
            return
        if status != "FINISHED" and self.uri.startswith("sqlite:"):
            close_reads_cut_short()
        self.flush()
        with store_call(self.uri, f"marking the run {status}"):
            if reason:
                self.client.set_tag(self._run_id, FAILURE_REASON, reason[:5000])
            self.client.set_terminated(self._run_id, status=status)

    def link(self) -> str | None:
        if self._run_id is None:
            return None
        page = f"#/experiments/{self.experiment_id}/runs"
        mode = "?workflowType=machine_learning"  # MLflow 3's UI in its model-training mode (else: its GenAI view)
        if self.uri.startswith(("http://", "https://")):  # a server: the run's page on it
            return f"MLflow run {self._run_id}: {self.uri.rstrip('/')}/{page}/{self._run_id}{mode}"
        return (f"MLflow run {self._run_id}: `mlflow ui --backend-store-uri {hide_password(self.uri)}`, then its page "
                f"http://127.0.0.1:5000/{page}/{self._run_id}{mode} (the runs table: without the id)")

