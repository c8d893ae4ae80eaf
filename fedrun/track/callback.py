"""Hydra callback: create the MLflow store once, in the launcher process, before a sweep's
jobs start — parallel jobs (joblib) would otherwise race to create the SQLite tables."""

from __future__ import annotations

import logging

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger("fedrun")


class InitTrackingStore(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        track = config.get("track") or {}
        if "mlflow" not in str(track.get("_target_", "")):
            return
        from mlflow.tracking import MlflowClient

        from fedrun.track.mlflow import default_uri

        try:
            MlflowClient(track.get("uri") or default_uri()).search_experiments(max_results=1)
        except Exception as err:  # the jobs will report a real tracking problem themselves
            log.warning("could not initialise the MLflow store before the sweep: %s", err)
