"""Plain-text Markdown tables (no extra dependency)."""

from __future__ import annotations


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def metrics_table(parts: dict[str, dict[str, float]]) -> str:
    """Rows = metrics, columns = parts (test, valid)."""
    names = list(next(iter(parts.values())).keys())
    rows = [[name] + [f"{values.get(name, float('nan')):.4f}" for values in parts.values()] for name in names]
    return markdown(["metric", *parts], rows)
