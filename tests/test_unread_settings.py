"""``backbone.l2`` and ``sim.local_epochs`` are read or refused: every method either trains differently
with an L2 weight than without one (with two local epochs than with one), or refuses the setting in one
named line before any data is read — never ignores it. (``method=pop`` trains nothing and reads neither.)"""

from __future__ import annotations

import pytest
import torch

from fedrun.app.plan import plan
from fedrun.errors import ConfigError
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


def trained_tensors(overrides: list[str]) -> dict[str, torch.Tensor]:
    """Every floating tensor of the method's state after one round, nested server state included."""
    method, _ = make_method([*overrides, "sim.seed=1"])
    round_of(method).train_round(0)
    tensors, pending = {}, list(method.state_dict().items())
    while pending:
        key, value = pending.pop()
        if isinstance(value, dict):
            pending += [(f"{key}.{k}", v) for k, v in value.items()]
        elif torch.is_tensor(value) and value.is_floating_point():
            tensors[key] = value
    return tensors


def method_overrides(case: str, table: dict[str, list[str]]) -> list[str]:
    overrides = table[case]
    named = any(o.startswith("method=") for o in overrides)
    return overrides if named else [f"method={case.split('-')[0]}", *overrides]


def moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in before if before[k].shape == after[k].shape and not torch.equal(before[k], after[k])]


@pytest.mark.parametrize("case", sorted(READS_L2))
def test_an_l2_weight_changes_the_first_round(case):
    overrides = method_overrides(case, READS_L2)
    # .001: a plain-SGD user step at lr 100 (FedGNN, PerFedRec) refuses l2 ≥ .005 (it would flip the rows' sign)
    without = trained_tensors([*overrides, "backbone.l2=0"])
    with_l2 = trained_tensors([*overrides, "backbone.l2=0.001"])
    assert moved(without, with_l2), f"{case}: backbone.l2=0.001 trained exactly as backbone.l2=0"


READS_LOCAL_EPOCHS = {k: v for k, v in READS_L2.items() if k in (
    "fedavg", "fedavg-ncf", "fedcl-copies", "cl4fedrec", "rcl4fedrec", "simgcl", "union", "fedgnn", "perfedrec",
    "perfedrecpp")}


@pytest.mark.parametrize("case", sorted(READS_LOCAL_EPOCHS))
def test_a_second_local_epoch_changes_the_first_round(case):
    overrides = method_overrides(case, READS_LOCAL_EPOCHS)
    one, two = trained_tensors([*overrides, "sim.local_epochs=1"]), trained_tensors([*overrides, "sim.local_epochs=2"])
    assert moved(one, two), f"{case}: sim.local_epochs=2 trained exactly as sim.local_epochs=1"


@pytest.mark.parametrize("overrides,why", [
    (["method=bil", "backbone=mf"], "method=bil: its loss is the hinge"),
    (["method=metamf", *RATED], "method=metamf: its loss is Eq. 10's rating MSE alone"),
    (["method=lightfr", "dataset.ratings=true"], "constant for ±1 codes"),
    (["method=fedcl", "backbone=gru4rec"], "a sequential backbone's users have no row"),
    (["method=central", "backbone=bert4rec"], "a sequential backbone's users have no row"),
])
def test_a_method_that_cannot_read_l2_refuses_it(overrides, why, tmp_path, monkeypatch):
    refused_before_any_data(overrides, "backbone.l2", "0.01", "0", why, tmp_path, monkeypatch)


@pytest.mark.parametrize("overrides,why", [
    (["method=central"], "it trains centrally"),
    (["method=svdpp", *RATED], "it trains centrally"),
    (["method=fcf", *RATED], "closed form"),
    (["method=fedmf", *RATED], "one gradient step on its ratings per round"),
    (["method=fedrecpp", *RATED], "one gradient step on its ratings per round"),
    (["method=privrec", *RATED], "method.local_steps"),
    (["method=metamf", *RATED, "backbone.l2=0"], "one gradient of each client's loss"),
])
def test_a_method_that_cannot_read_local_epochs_refuses_them(overrides, why, tmp_path, monkeypatch):
    refused_before_any_data(overrides, "sim.local_epochs", "3", "1", why, tmp_path, monkeypatch)


def refused_before_any_data(overrides, field, value, default, why, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))  # reading any file would fail
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + [*overrides, f"{field}={value}"]))
    assert refused.value.field == field and why in str(refused.value) and "\n" not in str(refused.value)
    plan(compose_cfg(SMALL + [*overrides, f"{field}={default}"]))  # the same run with the default is accepted


@pytest.mark.parametrize("overrides,l2", [
    (["+experiment=fedcl/table2", "row=fedcl/fed"], .03), (["+experiment=fedcl/table2", "row=fedcl/fedcl"], .03),
    (["+experiment=fedcl/table2", "row=fedcl/central"], 0.0), (["+experiment=fedcl/table2", "row=fedcl/bil"], 0.0),
    (["method=bil"], 0.0), (["method=fedcl"], .03),
])
def test_fedcl_ncf_regularizes_the_federated_rows_and_bil_still_plans(overrides, l2, tmp_path, monkeypatch):
    """The validated L2 of FedCL's federated NeuMF (issue #35) comes with ``backbone=fedcl/ncf``; the central
    rows keep the recorded 0, and BIL, which reads no L2, is set back to 0 rather than refused."""
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    cfg = compose_cfg([*overrides, "backbone=fedcl/ncf"])
    assert cfg.backbone.l2 == l2
    plan(compose_cfg(SMALL + [*overrides, "backbone=fedcl/ncf"]))
