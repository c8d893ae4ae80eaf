"""Shared helpers: compose the real config tree with overrides, build methods on synthetic data."""

from __future__ import annotations

import os
from pathlib import Path
from weakref import WeakKeyDictionary

import pytest
import torch

from fedrun.app.build import build
from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.sim.trainer import trainer_for

_ROUNDS: WeakKeyDictionary = WeakKeyDictionary()

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs one worker per core: each takes its share of them
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

DATA_DIR = Path(os.environ.get("FEDRUN_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "datasets"))
needs_data = pytest.mark.skipif(not (DATA_DIR / "MANIFEST.md").exists(), reason="real datasets not available")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every test gets its own parse cache, working dir (outputs/) and MLflow store, and no downloads."""
    monkeypatch.setenv("FEDRUN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(DATA_DIR))
    monkeypatch.setenv("FEDRUN_OFFLINE", "1")  # no test reaches the network; a missing file is a named error at once
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)  # a test's unseeded draws are the same whichever tests ran before it, on any device


def compose_cfg(overrides: list[str]):
    return compose(overrides)


SMALL = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "dataset.mean_length=8",
         "track=none", "sim.progress=false", "sim.clients_per_round=16"]


# A reference computed with CPU tensors (a per-client loop, a closed form): the test pins its run to the CPU,
# so it means the same on a machine whose default device is CUDA (the device checks compare the devices).
CPU_ORACLE = "sim.device=cpu"


def make_method(overrides: list[str], base: list[str] = SMALL):
    cfg = compose_cfg(base + overrides)
    p = plan(cfg)
    split = p.dataset.load()
    env = RunEnv.create(split, p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env)
    _ROUNDS[method] = trainer_for(method, p.privacy, p.attack, p.defense, p.sim)
    return method, env


def unpack(result):
    """A ``ClientResult`` as (uploads, new private rows, losses)."""
    return result.uploads, result.user, result.loss


def round_of(method: Method):
    """The rounds ``make_method`` set up for ``method`` (its federated round, or its own steps)."""
    return _ROUNDS[method]
