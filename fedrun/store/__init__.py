"""The MLflow store library: calls into a tracking store that fail in one line (``calls``), the store's runs,
experiments and sweep parents (``runs``), and whether a run's process is still alive (``liveness``). The
``track=mlflow`` option that records one run (``fedrun.track.mlflow``) uses it, as do sweeps, reports and
scripts."""
