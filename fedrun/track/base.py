"""Trackers record a run: params, tags, per-round metrics (batched), artifacts, final status."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar


class Tracker:
    Config: ClassVar[type]

    def __init__(self, config):
        self.config = config

    def start(self, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        pass

    def sweep_parent(self, experiment: str, sweep_dir: str, overrides: list[str]) -> str | None:
        """The id of the run that stands for the sweep in ``sweep_dir`` within ``experiment`` (created by the
        first job that asks), so each job's run is recorded as its child; None where runs cannot nest."""
        return None

    def resume(self, run_id: str) -> bool:
        """Reopen run ``run_id`` to continue it; False if this tracker cannot find it."""
        return False

    def fetch_checkpoint(self, run_id: str) -> Path:
        from fedrun.errors import ConfigError

        raise ConfigError("sim.resume", run_id, "a checkpoint path (this tracker cannot look up run ids)")

    @property
    def run_id(self) -> str | None:
        return None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path) -> None:
        pass

    def set_tags(self, tags: dict[str, str]) -> None:
        """Tags learned during the run (e.g. ``fedrun.collapsed``)."""

    def metric_history(self, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
        """The recorded (step, value) series of these metrics (those the run logged); none by default."""
        return {}

    def log_dataset(self, name: str, digest: str, source: str, profile: dict[str, Any]) -> None:
        """The run's data as a dataset input (MLflow: the runs table's Dataset column and the run page)."""

    def log_table(self, columns: dict[str, list], name: str) -> None:
        """A results table the tracker can show as a table (MLflow's table artifact)."""

    def flush(self) -> None:
        """Send buffered metrics now (before a checkpoint, so a resumed run's history has no gap)."""

    def log_checkpoint(self, path: Path) -> None:
        pass

    def finish(self, status: str, reason: str | None = None) -> None:
        """status: FINISHED | FAILED | KILLED; the reason is kept with the run."""

    def link(self) -> str | None:
        return None
