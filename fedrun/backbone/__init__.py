"""Backbones: the scoring models. Each declares its public and private parameters."""
