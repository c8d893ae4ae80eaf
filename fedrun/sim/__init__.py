"""The simulator: client sampling, batching, vectorized local training, the round loop."""
