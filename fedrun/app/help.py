"""``fedrun --help``: what fedrun is, its groups and options, example commands — read from ``conf/`` alone, so it
prints at once (no torch, no Hydra, no MLflow). ``fedrun --hydra-help`` keeps Hydra's own flags."""

from __future__ import annotations

from pathlib import Path

from fedrun.core.choices import options
from fedrun.core.paths import config_dir

GROUPS = ("method", "dataset", "backbone", "privacy", "attack", "defense", "audit", "eval", "sim", "track")
EXAMPLES = (
    ("fedrun method=fedcl dataset=beauty", "FedCL in its paper's setting (GRU4Rec, LDP ε 4, 16 clients per update)"),
    ("fedrun method=lightfr dataset=filmtrust", "LightFR on its code's split: a method picks its paper's protocol"),
    ("fedrun method=fedavg backbone=mf dataset=ml-100k sim.seed=2", "any group option or field on the command line"),
    ("fedrun -m method=central,fedavg sim.seed=1,2,3", "a sweep: one MLflow parent run and a report"),
    ("fedrun -m +experiment=lightfr/table5", "a paper's table as a preset (conf/experiment/)"),
)


def presets() -> list[str]:
    """A paper's folder of presets as ``<paper>/…``, a single preset by its name."""
    root = Path(config_dir()) / "experiment"
    return sorted(f"{p.name}/…" if p.is_dir() else p.stem for p in root.iterdir() if p.is_dir() or p.suffix == ".yaml")


def text() -> str:
    width = max(len(command) for command, _ in EXAMPLES)
    lines = ["fedrun — federated recommendation experiments: one command runs one experiment (or a sweep), many",
             "clients per round as batched tensor operations, every parameter, metric and table logged to MLflow.",
             "", "usage: fedrun [-m] group=option ... key=value ...      (Hydra overrides; -m runs a sweep)", "",
             "examples:"]
    lines += [f"  {command.ljust(width)}  # {what}" for command, what in EXAMPLES]
    lines += ["", "groups (group=option):"]
    for group in GROUPS:
        lines.append(f"  {group + ':':10} {', '.join(options(group))}")
    lines += [f"  {'presets:':10} +experiment=<preset>, a paper's table or figure or a cross-paper run: "
              f"{', '.join(presets())}",
              "", "more:",
              "  fedrun info                      every group and option",
              "  fedrun info method=fedcl         one option in full: its paper, equations, defaults, presets",
              "  fedrun data [<name>]             every dataset's files: present, downloadable, or where from",
              "  fedrun <overrides> --cfg job     the composed config, without running",
              "  fedrun-report <experiment>       mean ± std over seeds, the popularity floor beside every number",
              "  fedrun --hydra-help              Hydra's own flags (multirun, launchers, output folders)",
              "", "results: MLflow (sqlite:///outputs/mlflow.db unless track.uri / MLFLOW_TRACKING_URI says otherwise;",
              "`mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db`), run folders under outputs/runs/ and",
              "outputs/multirun/; data from $FEDRUN_DATA_DIR (default: the OS cache), fetched by the first run",
              "that needs it where it has a public address (`fedrun data`)."]
    return "\n".join(lines)
