"""The simulator layer (the ``sim`` config group), above the methods: the federated round (``round.py``, written
once), the run loop beside it (``loop.py``: rounds, validation, early stop), checkpoints, signals, and a sweep's
stop and its jobs (``sweep.py``)."""
