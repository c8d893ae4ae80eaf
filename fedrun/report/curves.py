"""A run's learning curve: the training loss per round and the validation (and per-epoch test) metric
per evaluation, one PNG logged with the run (issue #34: "each run logs a learning-curve PNG")."""

from __future__ import annotations

from pathlib import Path

History = dict[str, list[tuple[int, float]]]  # metric → [(step, value)]


def learning_curve(history: History, path: Path, title: str, monitor: str) -> Path | None:
    """Write the PNG: left the training loss per round, right the monitored metric per evaluation with
    the test floor dashed and the validation floor dotted. None when there is nothing to draw (a run of zero rounds)."""
    if not history.get("train_loss"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, metric_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    steps, values = zip(*history["train_loss"])
    loss_ax.plot(steps, values, lw=0.8)
    loss_ax.set(xlabel="round", ylabel="train loss", title="training loss")
    for part, style in (("valid", "-o"), ("test", "-s")):
        points = history.get(f"{part}_{monitor}")
        if points:
            x, y = zip(*points)
            metric_ax.plot(x, y, style, ms=3, label=part)
    for part, style in (("", "--"), ("valid_", ":")):
        floor = history.get(f"floor_{part}{monitor}")
        if floor:
            metric_ax.axhline(floor[-1][1], ls=style, color="grey", label=f"floor ({part.rstrip('_') or 'test'})")
    metric_ax.set(xlabel="round", ylabel=monitor, title=monitor)
    if metric_ax.lines:
        metric_ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
