"""A bare `fedrun method=X dataset=Y` runs X's paper's data protocol on Y where the paper used Y (issue #63)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fedrun.app.experiment import config_params
from fedrun.app.info import describe
from fedrun.core.choices import check_group_choices, options
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from tests.conftest import compose_cfg


def own_protocols() -> list[str]:
    """The protocol files that state a protocol (the others include their paper's: fcf/filmtrust → lightfr's)."""
    root = Path(config_dir()) / "protocol"
    return [pair for pair in options("protocol") if "dataset" in OmegaConf.load(root / f"{pair}.yaml")]


@pytest.mark.parametrize("pair", [*own_protocols(), "fcf/filmtrust", "union/ml-1m"])
def test_each_protocol_is_what_the_bare_command_of_its_pair_runs(pair):
    method, dataset = pair.split("/")
    included = {"fcf/filmtrust": "lightfr/filmtrust", "union/ml-1m": "rcl4fedrec/ml-1m"}
    stated = included.get(pair, pair)
    protocol_file = OmegaConf.load(Path(config_dir()) / "protocol" / f"{stated}.yaml")
    bare = compose_cfg([f"method={method}", f"dataset={dataset}"])
    assert bare.choices.protocol == pair  # (read now: choices resolve against the latest composition)
    wanted = OmegaConf.to_container(protocol_file.dataset)
    assert OmegaConf.to_container(OmegaConf.merge(bare.dataset, wanted)) == OmegaConf.to_container(bare.dataset)
    opted_out = compose_cfg([f"method={method}", f"dataset={dataset}", "~protocol"])
    assert opted_out.dataset == compose_cfg([f"dataset={dataset}"]).dataset  # ~protocol: the dataset's own


def test_the_issue_s_bare_commands_run_their_papers_data():
    lightfr = compose_cfg(["method=lightfr", "dataset=filmtrust"]).dataset
    assert lightfr.variant == "lightfr" and lightfr.split.protocol == "predefined"
    fedcl = compose_cfg(["method=fedcl", "dataset=ml-1m"]).dataset
    assert fedcl.min_item_count == 5  # the paper's 3,416 items
    cl4fedrec = compose_cfg(["method=cl4fedrec", "dataset=ml-1m"]).dataset
    assert cl4fedrec.variant == "split80-20" and cl4fedrec.split.valid_ratio == 0.1
    assert compose_cfg(["method=fedrecpp", "dataset=ml-100k"]).dataset.split.protocol == "predefined"
    other = compose_cfg(["method=fedavg", "dataset=ml-1m"])  # no paper protocol: the dataset's own, and no
    assert other.dataset.min_item_count == 0  # protocol logged (Hydra keeps the optional pair it found no file for)
    assert "choices.protocol" not in config_params(other, resolve=True)
    assert config_params(compose_cfg(["method=lightfr", "dataset=filmtrust"]), resolve=True)["choices.protocol"] == \
        "lightfr/filmtrust"


def test_a_misspelt_protocol_is_refused_before_hydra_and_info_lists_a_methods_protocols():
    with pytest.raises(ConfigError, match=r"protocol='lightfr/filmtrus' .*\(closest: lightfr/filmtrust"):
        check_group_choices(["method=lightfr", "protocol=lightfr/filmtrust,lightfr/filmtrus"])
    check_group_choices(["-m", "protocol=lightfr/filmtrust,lightfr/ciao", "sim.seed=1"])
    assert "its paper's data protocol with dataset=filmtrust" in describe("method=lightfr")
