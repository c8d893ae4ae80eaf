"""Sweeps on a cluster (issue #64): the launcher configs fedrun ships (``conf/hydra/launcher/slurm.yaml``,
``local.yaml``), what they derive from the run's ``sim`` settings, and the checks that run before Hydra starts a
sweep — a submitit launcher without its extra, a Slurm launcher on a machine without ``srun`` — each one line.

The launchers themselves are Hydra's submitit plugin (``pip install 'fedrun[cluster]'``); fedrun schedules nothing.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

from omegaconf import OmegaConf

from fedrun.errors import FedrunError

SUBMITIT = ("slurm", "local", "submitit_slurm", "submitit_local")  # the options that need the plugin
SLURM = ("slurm", "submitit_slurm")
CPUS_WITHOUT_THREADS = 4  # a job's CPUs when sim.threads is null (all cores of what Slurm gives it)


class LauncherError(FedrunError):
    """The sweep's launcher cannot run on this machine."""


def chosen_launcher(argv: list[str]) -> str | None:
    """The ``hydra/launcher=<option>`` of a command line, if any."""
    for arg in argv:
        match = re.fullmatch(r"\+*hydra/launcher=(\S+)", arg)
        if match:
            return match.group(1)
    return None


def check_launcher(argv: list[str]) -> None:
    """Before Hydra composes anything: a submitit launcher needs its plugin, a Slurm one needs ``srun``."""
    launcher = chosen_launcher(argv)
    if launcher not in SUBMITIT:
        return
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        raise LauncherError(f"hydra/launcher={launcher} needs Hydra's submitit launcher, which is not installed: "
                            "pip install 'fedrun[cluster]'")
    if launcher in SLURM and shutil.which("srun") is None:
        raise LauncherError(f"hydra/launcher={launcher} submits to Slurm, but this machine has no `srun` (run the "
                            "sweep from a Slurm login node; hydra/launcher=local runs the same jobs here)")


def job_cpus(threads: int | None) -> int:
    """``cpus_per_task`` of a job: its ``sim.threads``, else ``CPUS_WITHOUT_THREADS``."""
    return int(threads) if threads else CPUS_WITHOUT_THREADS


def job_gpus(device: str) -> int:
    """``gpus_per_node`` of a job: one when ``sim.device`` asks for CUDA, none otherwise (``auto`` on a CPU job)."""
    return 1 if str(device).startswith("cuda") else 0


def register() -> None:
    """``${fedrun_job_cpus:…}`` and ``${fedrun_job_gpus:…}`` for the launcher configs (idempotent)."""
    for name, function in (("fedrun_job_cpus", job_cpus), ("fedrun_job_gpus", job_gpus)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
