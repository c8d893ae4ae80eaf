"""The cluster launchers fedrun ships (conf/hydra/launcher/): their jobs' resources follow the run's sim settings,
and a launcher that cannot run here is one named line before Hydra starts (issue #64, item 2)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
from hydra import compose, initialize_config_dir

from fedrun.core import outdir
from fedrun.core.paths import config_dir
from fedrun.sim import launchers
from fedrun.sim.launchers import LauncherError, check_launcher


def launcher(*overrides):
    outdir.register()
    launchers.register()
    with initialize_config_dir(config_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True).hydra.launcher


@pytest.mark.parametrize("option", ["slurm", "local"])
def test_a_job_asks_for_the_cpus_and_gpus_its_sim_settings_use(option):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="fedrun[cluster] not installed")
    assert (launcher(f"hydra/launcher={option}", "sim.threads=2", "sim.device=cuda").cpus_per_task,
            launcher(f"hydra/launcher={option}", "sim.threads=2", "sim.device=cuda").gpus_per_node) == (2, 1)
    default = launcher(f"hydra/launcher={option}")
    assert (default.cpus_per_task, default.gpus_per_node) == (launchers.CPUS_WITHOUT_THREADS, 0)
    assert default._target_.endswith("SlurmLauncher" if option == "slurm" else "LocalLauncher")


def test_slurm_without_srun_is_one_named_line(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(LauncherError, match="no `srun`"):
        check_launcher(["-m", "hydra/launcher=slurm", "method=fedavg"])
    check_launcher(["-m", "hydra/launcher=local"])  # the local executor needs no Slurm
    check_launcher(["-m", "hydra/launcher=joblib"])  # not a submitit launcher


@pytest.mark.parametrize("option", ["slurm", "local", "submitit_slurm", "submitit_local"])
def test_a_submitit_launcher_without_the_extra_names_the_extra(option, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_submitit") else find_spec(name))
    with pytest.raises(LauncherError, match=r"pip install 'fedrun\[cluster\]'"):
        check_launcher([f"hydra/launcher={option}"])
