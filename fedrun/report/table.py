"""Tables as text: Markdown, and LaTeX (booktabs) for a paper (no extra dependency)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

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


def spread(values: Iterable[float], digits: int = 4) -> str:
    """``mean ± std`` (sample std) of ``values``, missing ones dropped; one value is written ``v (n = 1)``, never
    with a spread of 0 that was not measured; no value: ""."""
    present = [float(v) for v in values if v == v and v is not None]
    if not present:
        return ""
    mean = sum(present) / len(present)
    std = math.sqrt(sum((v - mean) ** 2 for v in present) / (len(present) - 1)) if len(present) > 1 else 0.0
    return mean_std(mean, std, len(present), digits)


def mean_std(mean: float, std: float, n: int, digits: int = 4) -> str:
    """``mean ± std`` of ``n`` values; ``mean (n = 1)`` for one value, whose spread was not measured."""
    return f"{mean:.{digits}f} (n = 1)" if n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_PATTERN = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(text: str) -> str:
    r"""``text`` with LaTeX's special characters escaped (``fedcl_ncf`` → ``fedcl\_ncf``)."""
    return _LATEX_PATTERN.sub(lambda match: _LATEX_SPECIAL[match.group(0)], str(text))


def latex(header: list[str], rows: list[list[str]], caption: str = "", note: str = "") -> str:
    r"""A booktabs ``table`` of ``rows`` (cells already LaTeX: escape text with :func:`latex_escape`): text
    columns left-aligned, numbers right-aligned (a column whose filled cells all start with a digit or ``$``);
    ``note`` goes under the rule (e.g. what a mark means). Needs ``\usepackage{booktabs}``."""
    filled = [[str(row[k]) for row in rows if str(row[k])] for k in range(len(header))]
    numeric = [bool(cells) and all(re.match(r"[$\d.-]", cell) for cell in cells) for cells in filled]
    lines = [r"\begin{table}[t]", r"\centering"]
    if caption:
        lines.append(rf"\caption{{{caption}}}")
    lines += [r"\begin{tabular}{" + "".join("r" if n else "l" for n in numeric) + "}", r"\toprule",
              " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(str(c) for c in row) + r" \\" for row in rows]
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    if note:
        lines.append(rf"\par\smallskip{{\footnotesize {note}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
