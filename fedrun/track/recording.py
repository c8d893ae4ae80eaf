"""A tracker that keeps every metric a run logs, step by step, and passes every call on to the run's own tracker:
the per-round history the Python API (``fedrun.api``) returns beside the final results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedrun.track.base import Tracker


class Recording(Tracker):
    """``inner``'s behaviour, plus ``history``: step → {metric: value}, every value logged (the last at a step)."""

    Config = type(None)

    def __init__(self, inner: Tracker):
        super().__init__(inner.config)
        self.inner = inner
        self.history: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.history.setdefault(step, {}).update({name: float(value) for name, value in metrics.items()})
        self.inner.log_metrics(metrics, step)

    def metric_history(self, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
        return {key: [(step, row[key]) for step, row in sorted(self.history.items()) if key in row]
                for key in keys if any(key in row for row in self.history.values())}

    def start(self, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        self.inner.start(experiment, run_name, params, tags)

    def sweep_parent(self, experiment: str, sweep_dir: str, overrides: list[str]) -> str | None:
        return self.inner.sweep_parent(experiment, sweep_dir, overrides)

    def resume(self, run_id: str) -> bool:
        return self.inner.resume(run_id)

    def fetch_checkpoint(self, run_id: str) -> Path:
        return self.inner.fetch_checkpoint(run_id)

    @property
    def run_id(self) -> str | None:
        return self.inner.run_id

    def log_artifact(self, path: Path) -> None:
        self.inner.log_artifact(path)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.inner.set_tags(tags)

    def log_dataset(self, name: str, digest: str, source: str, profile: dict[str, Any]) -> None:
        self.inner.log_dataset(name, digest, source, profile)

    def log_table(self, columns: dict[str, list], name: str) -> None:
        self.inner.log_table(columns, name)

    def flush(self) -> None:
        self.inner.flush()

    def log_checkpoint(self, path: Path) -> None:
        self.inner.log_checkpoint(path)

    def finish(self, status: str, reason: str | None = None) -> None:
        self.inner.finish(status, reason)

    def link(self) -> str | None:
        return self.inner.link()
