"""Plain-text Markdown tables (no extra dependency)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"(\d+(?:\.\d+)?(?:e-?\d+)?)")


def natural_key(values) -> tuple:
    """A sort key that orders the numbers inside a cell by value: "10" < "30" < "120", and
    "rcl4fedrec (method.synthetic_users=30)" before "…=120"; ``values`` is a cell or a tuple of cells."""
    cells = values if isinstance(values, tuple) else (values,)
    return tuple(tuple((0, float(part), "") if k % 2 else (1, 0.0, part)
                       for k, part in enumerate(_NUMBER.split(str(cell)))) for cell in cells)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def metrics_table(parts: dict[str, dict[str, float]]) -> str:
    """Rows = metrics, columns = parts (test, valid)."""
    names = list(next(iter(parts.values())).keys())
    rows = [[name] + [f"{values.get(name, float('nan')):.4f}" for values in parts.values()] for name in names]
    return markdown(["metric", *parts], rows)
