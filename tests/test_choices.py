"""A misspelt group option is refused before Hydra, with the closest options (issue #66)."""

from __future__ import annotations

import pytest

from fedrun.core.choices import check_group_choices
from fedrun.errors import ConfigError


@pytest.mark.parametrize("argv,field,closest", [
    (["method=fedcll"], "method='fedcll'", "fedcl"),
    (["-m", "dataset=ml-100k,ml-1mm"], "dataset='ml-1mm'", "ml-1m"),
    (["+experiment=lightfr/tabel5"], "experiment='lightfr/tabel5'", "lightfr/table5"),
    (["defense=meadian"], "defense='meadian'", "median"),
])
def test_a_misspelt_option_names_the_group_and_the_closest_options(argv, field, closest):
    with pytest.raises(ConfigError, match=rf"{field} is not allowed: expected one of .*\(closest: {closest}"):
        check_group_choices(argv)


def test_real_options_fields_and_sweep_syntax_pass():
    check_group_choices(["-m", "method=fedavg,central", "backbone=fedcl/gru4rec", "+experiment=lightfr/table5",
                         "sim.seed=1,2,3", "method.optimizer.lr=0.1", "hydra/launcher=joblib",
                         "dataset=glob(ml-*)", "~protocol", "experiment_name=x"])
