"""A refused value is answered before torch loads (``fedrun.app.preflight``), with the same error ``plan`` gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedrun.app.build import resolve_target
from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.app.preflight import GROUPS, check_config, option_config
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError


def shipped_options() -> list[tuple[str, str]]:
    """(group, _target_) of every option in conf/ (a preset's own target included)."""
    found = set()
    for path in Path(config_dir()).rglob("*.yaml"):
        node = yaml.safe_load(path.read_text())
        if isinstance(node, dict) and isinstance(node.get("_target_"), str):
            group = path.relative_to(config_dir()).parts[0]
            if group in GROUPS:
                found.add((group, node["_target_"]))
    return sorted(found)


@pytest.mark.parametrize(("group", "target"), shipped_options())
def test_every_option_config_found_from_the_source_is_the_class_config(group, target):
    assert option_config(target, group) is resolve_target(target, group).Config


def test_every_option_config_is_found_without_torch():
    code = ("import sys\n"
            "from fedrun.app.preflight import option_config\n"
            f"for group, target in {shipped_options()!r}:\n"
            "    option_config(target, group)\n"
            "print('torch' in sys.modules, 'mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


REFUSED = [
    ["privacy=ldp", "privacy.epsilon=-1"],
    ["method=fedcl", "method.optimizer.lr=abc"],
    ["defense=krum", "defense.f=-1"],
    ["backbone=ncf", "backbone.layers=[]"],
    ["attack=a_hum", "attack.fraction=2"],
    ["eval=sampled", "eval.num_negatives=0"],
    ["sim.epochs=0"],
    ["+method.nothing=1"],
    ["+experiment_nam=x"],
]


@pytest.mark.parametrize("overrides", REFUSED, ids=lambda o: " ".join(o))
def test_preflight_refuses_what_plan_refuses_with_the_same_words(overrides):
    cfg = compose(overrides)
    with pytest.raises(ConfigError) as early:
        check_config(cfg)
    with pytest.raises(ConfigError) as late:
        plan(cfg)
    assert str(early.value) == str(late.value)


def test_a_config_preflight_accepts_is_one_plan_accepts():
    cfg = compose(["method=fedavg", "dataset=synthetic", "privacy=ldp", "privacy.targets=[item_rows]", "attack=a_hum",
                   "defense=krum", "backbone=ncf"])
    check_config(cfg)
    plan(cfg)


def test_a_refused_value_on_the_command_line_never_imports_torch():
    """The CLI's own path: Hydra composes, the app refuses (exit 2, one line) and torch stays unloaded."""
    code = ("import sys, runpy\n"
            "sys.argv = ['fedrun', 'privacy=ldp', 'privacy.epsilon=-1', 'hydra.run.dir=.', "
            "'hydra.output_subdir=null', 'hydra/job_logging=none', 'hydra/hydra_logging=none']\n"
            "from fedrun.app import cli\n"
            "try:\n    cli.main()\nexcept SystemExit as e:\n    print(e.code)\n"
            "print('torch' in sys.modules, 'mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2", "False", "False"]
    assert "privacy.epsilon=-1.0 is not allowed: expected a number > 0" in done.stderr
