"""Parsers for the plain-text formats of the offline datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrun.errors import DataError


def _ints(path: Path, line_no: int, tokens: list[str]) -> list[int]:
    try:
        return [int(tok) for tok in tokens]
    except ValueError:
        raise DataError(
            f"Malformed line {line_no} in {path}: expected integer ids separated by spaces, got "
            f"{' '.join(tokens)[:80]!r}. Replace the file with the original."
        ) from None


def read_sequences(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``user item item ...`` per line → raw (user, item, position-in-line) arrays."""
    users, items, positions = [], [], []
    with open(path) as handle:
        for line_no, line in enumerate(handle, start=1):
            tokens = line.split()
            if not tokens:
                continue
            row = _ints(path, line_no, tokens)
            seq = row[1:]
            users.append(np.full(len(seq), row[0], dtype=np.int64))
            items.append(np.asarray(seq, dtype=np.int64))
            positions.append(np.arange(len(seq), dtype=np.int64))
    if not users:
        raise DataError(f"{path} holds no interactions. Replace the file with the original.")
    return np.concatenate(users), np.concatenate(items), np.concatenate(positions)


def read_table(path: Path, n_columns: int, *, sep: str | None = None, skip_header: bool = False) -> np.ndarray:
    """A numeric table with ``n_columns`` columns → float64 [rows, n_columns]."""
    rows = []
    with open(path) as handle:
        for line_no, line in enumerate(handle, start=1):
            if skip_header and line_no == 1:
                continue
            tokens = line.strip().split(sep)
            if tokens == [""] or not tokens:
                continue
            try:
                if len(tokens) < n_columns:
                    raise ValueError
                rows.append([float(tok) for tok in tokens[:n_columns]])
            except ValueError:
                raise DataError(
                    f"Malformed line {line_no} in {path}: expected {n_columns} numeric columns, got "
                    f"{line.strip()[:80]!r}. Replace the file with the original."
                ) from None
    return np.asarray(rows, dtype=np.float64).reshape(-1, n_columns)
