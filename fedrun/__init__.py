"""fedrun: a vectorized experiment runner for federated recommender systems."""

__version__ = "0.1.0"
