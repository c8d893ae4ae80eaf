"""Every experiment preset runs one round of every row on small synthetic data (the full
reproductions are long runs kept out of CI), and the report puts the paper's numbers beside
fedrun's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fedrun.app.experiment import run
from fedrun.app.plan import plan
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from tests.conftest import compose_cfg

EXPERIMENTS = Path(config_dir()) / "experiment"
# cells a matrix sweeps that the method's declared capabilities refuse (its report shows them as n/a):
# FedCL offers an attacker its model view only, and EB and RA train like a benign client
REFUSED = {("robustness/matrix_fedcl", "robustness/eb"), ("robustness/matrix_fedcl", "robustness/ra")}
TINY = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "dataset.mean_length=8",
        "sim.max_rounds=1", "sim.clients_per_round=8", "sim.progress=false", "track=none", "method.n_clusters=4"]


def swept(params, key: str) -> list[str | None]:
    values = [v.strip() for v in str(params.get(key, "")).split(",") if v.strip()]
    return values or [None]


def row_choices(row: str) -> dict[str, str]:
    """The group options a row's own defaults list selects (`override /G: X`)."""
    node = OmegaConf.to_container(OmegaConf.load(Path(config_dir()) / "row" / f"{row}.yaml"))
    return {key.removeprefix("override ").strip("/"): str(value)
            for entry in node.get("defaults", []) if isinstance(entry, dict) for key, value in entry.items()}


def presets() -> list[tuple[str, str, str | None]]:
    """(preset, row, backbone) for every preset that sweeps, every row and backbone it sweeps."""
    out = []
    for path in sorted(EXPERIMENTS.rglob("*.yaml")):
        params = OmegaConf.load(path).get("hydra", {}).get("sweeper", {}).get("params", {})
        if params:
            name = path.relative_to(EXPERIMENTS).with_suffix("").as_posix()
            out += [(name, row, backbone) for row in swept(params, "row") for backbone in swept(params, "backbone")
                    if row is not None]
    return out


@pytest.mark.parametrize("preset,row,backbone", presets())
def test_every_preset_row_runs_one_round(preset, row, backbone):
    tiny = [o for o in TINY if not o.startswith("method.n_clusters") or row.endswith("/fedcl")]
    if preset.startswith(("fedrecpp/", "lightfr/")):  # explicit ratings
        tiny += ["dataset.ratings=true", "dataset.split.protocol=random_ratio"]
    if preset.startswith("lightfr/"):  # its data setups name real datasets
        tiny = ["~setup", *tiny]
    if preset.startswith(("robustness/", "rcl4fedrec/")):  # the A-hum code's predefined ML-1M / AZ files
        variant = ["~dataset.variant"] * (preset != "rcl4fedrec/table2-more")
        tiny = [*variant, *tiny, "dataset.split.protocol=random_ratio"]
    if preset.startswith("rcl4fedrec/"):  # 80 items: fewer hot items than that
        tiny += ["method.hot_items=10"] if row.endswith(("rcl4fedrec", "_cl", "synthetic", "views")) else []
    if preset.startswith("attacks/fedrecattack"):  # Steam's predefined files, 99 sampled negatives
        tiny += ["dataset.split.protocol=random_ratio", "eval.num_negatives=20"]
    if backbone is not None:
        tiny.append(f"backbone={backbone}")
    cfg = compose_cfg([f"+experiment={preset}", f"row={row}", *tiny])
    if cfg.choices.attack != "none":  # a paper's 0.1 % of 60 users is no malicious client (refused by name)
        cfg = compose_cfg([f"+experiment={preset}", f"row={row}", *tiny, "attack.fraction=0.05"])
    assert cfg.get("paper") and cfg.get("experiment_name")
    # what a row selects is what runs: neither its preset's common file nor its method's paper setting
    # (conf/setting/) may override it (rCL4FedRec's defended rows ran the plain sum: the common file's
    # `override /defense: sum` won over the rows' Krum, Median, Trimmed mean and HiCS)
    wanted = {group: option for group, option in row_choices(row).items() if not (group == "backbone" and backbone)}
    assert {group: cfg.choices[group] for group in wanted} == wanted
    if (preset, row) in REFUSED:
        with pytest.raises(ConfigError, match="attack="):
            run(cfg)
        return
    result = run(cfg)
    assert (result.rounds >= 1 or row.endswith("/pop")) and result.test  # popularity trains nothing


def test_presets_exist_for_the_paper_tables():
    assert {"fedcl/table2", "fedcl/table3", "fedrecpp/table2", "fedrecpp/table3", "fedrecpp/fig2",
            "lightfr/table5", "lightfr/table7"} <= {
        p for p, _, _ in presets()}


def figure_values() -> list[tuple[str, str, str]]:
    """(preset, swept setting, value) for every value on a figure preset's x axis."""
    out = []
    for path in sorted(EXPERIMENTS.rglob("fig*.yaml")):
        preset = OmegaConf.load(path)
        if "figure" not in preset:
            continue
        x = str(preset.figure.x)
        name = path.relative_to(EXPERIMENTS).with_suffix("").as_posix()
        out += [(name, x, value) for value in swept(preset.hydra.sweeper.params, x) if x != "row"]
    return out


@pytest.mark.parametrize("preset,setting,value", figure_values())
def test_every_figure_value_is_valid(preset, setting, value):
    """Each point of a figure's x axis passes validation and lands in the right field."""
    cfg = compose_cfg([f"+experiment={preset}", f"{setting}={value}", "track=none"])
    planned = plan(cfg)
    assert str(OmegaConf.select(cfg, setting)) == value
    if setting == "sim.clients_per_round":
        assert planned.sim.round_size(1000) == round(float(value) * 1000)


@pytest.mark.integration
def test_report_prints_the_paper_beside_fedrun(tmp_path):
    fedrun = shutil.which("fedrun") or str(Path(sys.executable).parent / "fedrun")
    report = shutil.which("fedrun-report") or str(Path(sys.executable).parent / "fedrun-report")
    sweep = subprocess.run([fedrun, "-m", "+experiment=fedcl/table3", "row=fedcl/fed,fedcl/fedcl", "dataset=ml-1m",
                            "backbone=fedcl/ncf",
                            "sim.seed=1", "sim.max_rounds=2", "sim.progress=false", "method.n_clusters=4",
                            "sim.eval_every=0", "track.experiment=preset-report", "dataset.split.seed=0",
                            "dataset.min_user_count=1000"],  # ML-1M's 41 heaviest users: the report, not NCF, is tested
                           capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    result = subprocess.run([report, "preset-report", "--metrics", "test_hr_at_10"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Beside the paper (fedcl/table3)" in result.stdout
    beside = result.stdout.split("Beside the paper")[1]
    line = next(x for x in beside.splitlines() if "| ml-1m" in x and "| fedcl " in x)
    assert "0.0675" in line  # the paper's NCF+FedCL HR@10 on ML-1M, beside fedrun's number


def composed_sweeps() -> list[tuple[str, dict]]:
    """(preset, its sweep after composition: inherited presets' sweeps merged in)."""
    from hydra import compose, initialize_config_dir

    out = []
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        for path in sorted(EXPERIMENTS.rglob("*.yaml")):
            name = path.relative_to(EXPERIMENTS).with_suffix("").as_posix()
            if name.endswith("common"):
                continue
            cfg = compose("config", overrides=[f"+experiment={name}"], return_hydra_config=True)
            out.append((name, dict(cfg.hydra.sweeper.params or {})))
    return out


@pytest.mark.parametrize("preset,sweep", composed_sweeps(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_sweep_never_sets_a_group_its_rows_override(preset, sweep):
    """A swept group that a swept row also overrides would win over the row (the CLI's order), and
    every row but one would run the wrong option — or fail (a robustness matrix inheriting an attacks
    preset's `attack` sweep did)."""
    rows = [r.strip() for r in str(sweep.get("row", "")).split(",") if r.strip()]
    overridden = {group for row in rows for group in row_choices(row)}
    assert not overridden & set(sweep), f"{preset} sweeps {sorted(overridden & set(sweep))}, which its rows set"
