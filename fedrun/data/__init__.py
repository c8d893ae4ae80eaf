"""Data: files + sha256, interactions, filtering, splits, the client store, negative sampling."""
