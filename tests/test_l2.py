"""``backbone.l2`` is read or refused: every method either trains differently with an L2 weight than
without one, or refuses the weight in one named line before any data is read — never ignores it. (``method=pop``
trains nothing and reads no backbone.)"""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.experiment import plan
from tests.conftest import SMALL, compose_cfg, make_method, round_of

SMALL_VIEWS = ["method.synthetic_users=6", "method.synthetic_items=5", "method.synthetic_fit_steps=20"]
RATED = ["dataset.ratings=true", "backbone=pmf", "backbone.loss=mse"]
READS_L2 = {  # method → the overrides it runs with here
    "central": [], "fedavg": [], "fedavg-ncf": ["method=fedavg", "backbone=ncf"],
    "fedcl-mf": ["method=fedcl", "backbone=mf", "method.semi_hard=8"],
    "fedcl-ncf": ["method=fedcl", "backbone=ncf", "method.semi_hard=0", "privacy=none"],
    "fedcl-copies": ["method=fedcl", "backbone=ncf", "method.semi_hard=8", "sim.fast_path=off"],
    "cl4fedrec": ["backbone=ncf", *SMALL_VIEWS], "rcl4fedrec": ["backbone=ncf", "method.hot_items=10", *SMALL_VIEWS],
    "simgcl": ["backbone=ncf"], "union": ["backbone=ncf"],
    "fedgnn": ["backbone=lightgcn"], "perfedrec": ["backbone=lightgcn"],
    "perfedrecpp": ["backbone=lightgcn", "method.pretrain_rounds=0"],  # Eq. 4's pre-training is InfoNCE alone
    "fedmf": RATED, "fcf": RATED, "fedrec": RATED, "fedrecpp": RATED, "privrec": RATED, "svdpp": RATED,
    "median_quantized": RATED,
}


def trained_tensors(overrides: list[str], l2: float) -> dict[str, torch.Tensor]:
    method, _ = make_method([*overrides, f"backbone.l2={l2}", "sim.seed=1"])
    round_of(method).train_round(0)
    return {k: v for k, v in method.state_dict().items() if torch.is_tensor(v) and v.is_floating_point()}


@pytest.mark.parametrize("case", sorted(READS_L2))
def test_an_l2_weight_changes_the_first_round(case):
    overrides = READS_L2[case]
    name = case.split("-")[0]
    overrides = overrides if any(o.startswith("method=") for o in overrides) else [f"method={name}", *overrides]
    without, with_l2 = trained_tensors(overrides, 0.0), trained_tensors(overrides, 0.5)
    moved = [k for k in without if without[k].shape == with_l2[k].shape and not torch.equal(without[k], with_l2[k])]
    assert moved, f"{case}: backbone.l2=0.5 trained exactly as backbone.l2=0"


@pytest.mark.parametrize("overrides,why", [
    (["method=bil", "backbone=mf"], "method=bil: its loss is the hinge"),
    (["method=metamf", *RATED], "method=metamf: its loss is Eq. 10's rating MSE alone"),
    (["method=lightfr", "dataset.ratings=true"], "constant for ±1 codes"),
    (["method=fedcl", "backbone=gru4rec"], "a sequential backbone's users have no row"),
    (["method=central", "backbone=bert4rec"], "a sequential backbone's users have no row"),
])
def test_a_method_that_cannot_read_l2_refuses_it(overrides, why, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))  # reading any file would fail
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + [*overrides, "backbone.l2=0.01"]))
    assert refused.value.field == "backbone.l2" and why in str(refused.value)
    plan(compose_cfg(SMALL + [*overrides, "backbone.l2=0"]))  # the same run without the weight is accepted
