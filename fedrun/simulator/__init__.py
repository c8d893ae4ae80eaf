"""The simulator layer, above the methods: the federated round (``round.py``, written once) and
the run loop beside it (``loop.py``: rounds, validation, early stop, checkpoints, signals)."""
