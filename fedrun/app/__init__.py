"""The application floor: the ``fedrun`` Hydra app (``cli``) and ``fedrun info``, composing a config outside
the app (``compose``), one run end to end (``experiment``: plan, build, run, record), the capability checks
before any data is read (``build``, ``validate``), and ``fedrun-report`` with a sweep's own report."""
