"""The kernels of the simulator: client sampling, bucketing and padding, vectorized local
training, row gathers and per-row reductions, upload guards, the server optimizer, and the
run's environment (``RunEnv``, ``SimConfig``) every method receives. The round itself and
the run loop live one layer up, in ``fedrun.sim``."""
