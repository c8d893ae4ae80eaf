"""fedrun from Python: compose a run's config, run it, and get its results with the per-round history.

    import fedrun

    result = fedrun.run("method=fedavg", "backbone=mf", "dataset=ml-100k", "sim.epochs=5", "sim.seed=2")
    result.test["ndcg_at_10"], result.floor["ndcg_at_10"]    # the final test metrics and the popularity floor
    result.history[["step", "train_loss", "valid_ndcg_at_10"]]  # one row per logged step (pandas)

    cfg = fedrun.compose("method=fedcl", "dataset=beauty")      # the config the CLI would run, to edit first
    cfg.sim.epochs = 2
    result = fedrun.run(config=cfg)

The overrides are the command line's (``group=option``, ``key=value``, ``+experiment=<preset>``), checked the same
way before any work starts; a run is recorded as the CLI records it (``track=none`` to record nothing). A sweep is
the CLI's (``fedrun -m``): from Python, loop over ``run`` calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

FLOOR_PREFIX = "floor_"


@dataclass(frozen=True)
class Result:
    """What one run produced."""

    test: dict[str, float]  # the tested model's test metrics
    valid: dict[str, float]  # its validation metrics (empty without a validation split)
    floor: dict[str, float]  # the popularity floor (rating metrics: the user + item bias baseline) on the test split
    history: pd.DataFrame  # the metrics the run logged along the way: one row per step (a round), "step" first
    rounds: int  # server rounds run
    run_id: str | None  # the MLflow run (None with track=none)
    config: DictConfig = field(repr=False)  # the composed config that ran


def compose(*overrides: str) -> DictConfig:
    """The config one run with these overrides would see (the CLI's composition; misspelt options refused)."""
    from fedrun.app.compose import compose as compose_config
    from fedrun.core.choices import check_group_choices

    check_group_choices(list(overrides))
    return compose_config(list(overrides))


def run(*overrides: str, config: DictConfig | None = None) -> Result:
    """Run one experiment (``overrides`` composed as the CLI composes them, or ``config`` as given)."""
    import pandas as pd

    from fedrun.app import experiment
    from fedrun.track.recording import Recording

    cfg = config if config is not None else compose(*overrides)
    kept: list[Recording] = []

    def recording(tracker):
        kept.append(Recording(tracker))
        return kept[0]

    outcome = experiment.run(cfg, recording=recording)
    history = kept[0].history if kept else {}
    final = history.get(max(history), {}) if history else {}
    floor = {name[len(FLOOR_PREFIX):]: value for name, value in final.items() if name.startswith(FLOOR_PREFIX)
             and not name.startswith(FLOOR_PREFIX + "valid_")}
    rows = [{"step": step, **{k: v for k, v in row.items() if not k.startswith(FLOOR_PREFIX)}}
            for step, row in sorted(history.items())]  # the floors are constants: in ``floor``, not per step
    frame = pd.DataFrame(rows).dropna(axis=1, how="all") if rows else pd.DataFrame(columns=["step"])
    return Result(dict(outcome.test), dict(outcome.valid), floor, frame, outcome.rounds,
                  kept[0].run_id if kept else None, cfg)
