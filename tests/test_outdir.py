"""Output folders no two fedrun processes share (``fedrun/core/outdir.py``)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from omegaconf import OmegaConf

from fedrun.core import outdir
from fedrun.core.paths import config_dir


def test_a_taken_folder_is_claimed_as_the_next_free_number(tmp_path):
    base = tmp_path / "runs" / "2026-11-28" / "01-42-20"
    assert outdir.claim(str(base)) == str(base)
    assert outdir.claim(str(base)) == f"{base}-2"
    assert outdir.claim(str(base)) == f"{base}-3"
    assert all(Path(f"{base}{suffix}").is_dir() for suffix in ("", "-2", "-3"))


def test_processes_claiming_one_folder_at_once_each_get_their_own(tmp_path):
    """Two sweeps started in the same second shared one folder: one checkpoint file, one stop marker."""
    base = str(tmp_path / "01-42-20")
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        claimed = pool.map(outdir.claim, [base] * 12)
    assert len(set(claimed)) == 12
    assert set(claimed) == {base} | {f"{base}-{n}" for n in range(2, 13)}


def test_run_and_sweep_folders_are_claimed_and_resolved_once_per_config(tmp_path, monkeypatch):
    hydra = OmegaConf.load(Path(config_dir()) / "config.yaml").hydra
    for node in (hydra.run, hydra.sweep):
        assert OmegaConf.to_container(node)["dir"].startswith("${fedrun_claim:outputs/"), node
    outdir.register()
    monkeypatch.chdir(tmp_path)
    cfg = OmegaConf.create({"dir": "${fedrun_claim:outputs/runs/same-second}", "again": "${dir}"})
    other = OmegaConf.create({"dir": "${fedrun_claim:outputs/runs/same-second}"})
    assert cfg.dir == cfg.again == cfg.dir == "outputs/runs/same-second"  # cached: one folder per config
    assert other.dir == "outputs/runs/same-second-2"  # another process's config (or another run)
