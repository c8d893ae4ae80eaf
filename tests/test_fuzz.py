"""Random valid and invalid overrides for short runs: each ends in a finished run or a clean
error (a FedrunError, or Hydra's own message for a malformed override) — never anything else."""

from __future__ import annotations

import os

import pytest
from hydra.errors import HydraException
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from omegaconf.errors import OmegaConfBaseException

from fedrun.app import experiment
from fedrun.errors import FedrunError
from tests.conftest import compose_cfg

BASE = ["dataset=synthetic", "dataset.n_users=40", "dataset.n_items=60", "dataset.mean_length=8",
        "track=none", "sim.progress=false", "sim.max_rounds=2", "sim.epochs=1", "sim.clients_per_round=8"]

# key: (valid values, invalid values); three draws in four take a valid value
VALUES = {
    "method": (["fedavg", "central", "pop"], []),
    "backbone": (["mf", "ncf", "pmf"], []),
    "defense": (["mean", "sum"], []),
    "eval": (["full", "sampled"], []),
    "sim.clients_per_round": ([1, 4, 16, 40], [0, -2, 41]),
    "sim.local_epochs": ([1, 2, 3], [0, -1]),
    "sim.buckets": ([1, 3, 8], [0]),
    "sim.min_bucket_clients": ([1, 4], [0]),
    "sim.max_slots": ([50, 100000], [0]),
    "sim.eval_every": ([0, 1, 2], [-1]),
    "sim.seed": ([0, 1, 7], []),
    "sim.fast_path": (["auto", "off"], ["maybe"]),
    "dataset.split.protocol": (["loo", "kfold", "random_ratio", "temporal_ratio"], ["predefined", "x"]),
    "dataset.split.test_ratio": ([0.1, 0.2, 0.5], [-0.1, 0.0, 1.0, 2.0]),
    "dataset.min_user_count": ([0, 5, 10], [40]),
    "dataset.min_item_count": ([0, 2, 4], [10000]),
    "dataset.k_core": ([True, False], []),
    "dataset.ratings": ([True, False], []),
    "dataset.n_items": ([30, 60], [5]),
    "dataset.mean_length": ([5.0, 8.0, 12.0], [0.5, 100.0]),
    "backbone.dim": ([1, 4, 8], [0, -1]),
    "backbone.loss": (["bpr", "bce", "mse"], ["hinge"]),
    "eval.ks": (["[5]", "[1,100]", "[3,10]"], ["[0]", "[]"]),
    "eval.kind": (["auto", "ranking"], ["rating", "other"]),
}
METHOD_VALUES = {  # keys that exist for fedavg / central only
    "method.optimizer.lr": ([1e-3, 0.1, 1.0], [-1.0, 0.0, 1e30]),
    "method.optimizer.name": (["sgd", "adam"], ["lbfgs"]),
    "method.optimizer.momentum": ([0.0, 0.9], [1.0]),
    "method.num_negatives": ([0, 1, 4], [-1, 70]),
}


def value(draw, choices):
    valid, invalid = choices
    if invalid and draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(invalid))
    return draw(st.sampled_from(valid))


@st.composite
def overrides(draw):
    chosen = draw(st.dictionaries(st.sampled_from(sorted(VALUES)), st.none(), max_size=6))
    picked = {key: value(draw, VALUES[key]) for key in chosen}
    if picked.get("method", "fedavg") != "pop":
        extra = draw(st.dictionaries(st.sampled_from(sorted(METHOD_VALUES)), st.none(), max_size=2))
        picked.update({key: value(draw, METHOD_VALUES[key]) for key in extra})
    groups = [f"{k}={v}" for k, v in picked.items() if "." not in k]
    return groups + [f"{k}={v}" for k, v in picked.items() if "." in k]


# CI draws a fixed sample (derandomized); FEDRUN_FUZZ_EXAMPLES=1000 explores more, randomly.
EXAMPLES = int(os.environ.get("FEDRUN_FUZZ_EXAMPLES", 0))


@settings(max_examples=EXAMPLES or 60, derandomize=not EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides())
def test_every_run_finishes_or_fails_cleanly(extra):
    try:
        cfg = compose_cfg(BASE + extra)
    except (HydraException, OmegaConfBaseException):
        event("hydra rejected the override")
        return  # Hydra rejects a malformed override with its own one-paragraph message
    try:
        result = experiment.run(cfg)
    except FedrunError as err:
        event(f"clean error: {type(err).__name__}")
        return
    event("finished")
    assert result.test, extra


def float_keys() -> list[tuple[str, str, str]]:
    """(group, option, key) for every number an option's YAML holds as a float, nested keys dotted."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from fedrun.core.paths import config_dir

    def floats(node, prefix=""):
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                yield from floats(value, name + ".")
            elif isinstance(value, float):
                yield name

    out = []
    root = Path(config_dir())
    for group in ("method", "backbone", "privacy", "attack", "defense", "eval", "sim", "dataset"):
        for path in sorted((root / group).glob("*.yaml")):
            node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            out += [(group, path.stem, key) for key in floats(node)]
    return out


@pytest.mark.parametrize("group,option,key", float_keys(), ids=lambda v: v)
@pytest.mark.parametrize("bad", ["inf", "nan"])
def test_every_float_of_every_option_refuses_non_finite_values_by_name(group, option, key, bad, tmp_path,
                                                                       monkeypatch):
    """Table-driven, over every float key the shipped options hold: NaN and inf end in one ConfigError that
    names that key, before any data is read (inf used to pass every "> 0" check)."""
    from fedrun.app.plan import plan
    from fedrun.errors import ConfigError

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    choice = [] if group == "sim" else [f"{group}={option}"]
    base = [o for o in BASE if not o.startswith("dataset")] if group == "dataset" else BASE  # synthetic's keys
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(base + choice + [f"{group}.{key}={bad}"]))
    assert refused.value.field == f"{group}.{key}", str(refused.value)
