"""Declared capabilities: bad combinations end in one named line before any data is read, and the
round's attack seam hands an attacker the public model view only."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
import torch

from fedrun.app.plan import plan
from fedrun.attack.base import Attack
from fedrun.backbone.base import PublicParams
from fedrun.defense.base import Defense
from fedrun.errors import ConfigError
from fedrun.types import Aggregate, RoundContext, Uploads
from tests.conftest import SMALL, compose_cfg, make_method, round_of
from tests.test_privacy_boundary import Poison


@dataclass
class BoostConfig:
    target: int = 3
    clients: int = 2
    step: float = 0.5


class BoostTarget(Attack):
    """A test attack: ``clients`` malicious clients each push the target's row along itself."""

    Config = BoostConfig

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads:
        n, target = self.config.clients, self.config.target
        row = view.item[target] * self.config.step  # [di]
        return Uploads(n, torch.arange(n), torch.full((n,), target), row.expand(n, -1).clone(),
                       {k: torch.zeros(n, *v.shape) for k, v in view.net.items()}, torch.ones(n))


@dataclass
class MedianConfig:
    pass


class RowMedian(Defense):
    """A test robust rule (coordinate-wise median per item row): declares itself non-linear."""

    Config = MedianConfig

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        items = torch.unique(uploads.row_item)
        rows = [uploads.row_delta[uploads.row_item == i].median(0).values for i in items.tolist()]
        return Aggregate(items, torch.stack(rows), {k: v.median(0).values for k, v in uploads.dense.items()})


ATTACK = "attack._target_=tests.test_capabilities.BoostTarget"
MEDIAN = ["defense._target_=tests.test_capabilities.RowMedian", "~defense.weighting"]
RATED = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "dataset.mean_length=8", "track=none",
         "dataset.ratings=true", "backbone=pmf", "backbone.loss=mse"]


@pytest.mark.parametrize("overrides,group,why", [
    ([*MEDIAN, "method=fedmf", *RATED], "defense", "method=fedmf: its server adds ciphertexts"),
    (["defense.weighting=data_size", "method=lightfr", "backbone=binary-mf", *RATED[:-2]], "defense",
     "a linear rule with unit weights"),
    ([*MEDIAN, "method=fcf", *RATED], "defense", "method=fcf"),
    ([ATTACK, "method=central"], "attack", "method=central: it trains centrally"),
    (["privacy=ldp", "method=pop"], "privacy", "method=pop: it trains centrally"),
    (["defense=sum", "method=central"], "defense", "method=central"),
    ([*MEDIAN, "method=pop"], "defense", "method=pop"),
    ([ATTACK, "method=fcf", *RATED], "attack", "method=fcf"),
    ([ATTACK, "method=metamf", *RATED, "backbone.l2=0", "backbone.dim=8"], "attack", "method=metamf"),
    (["privacy=ldp", "privacy.targets=[item_rows]", "method=fedmf", *RATED], "privacy", "method=fedmf"),
    (["privacy=ldp", "privacy.targets=[item_rows]", "method=privrec", *RATED], "privacy", "method=privrec"),
    (["privacy=ldp", "privacy.targets=[item_rows]", "method=fedrecpp", *RATED], "privacy", "method=fedrecpp"),
    (["backbone=gru4rec", "method=fedavg"], "backbone", "method=fedavg"),
    (["privacy=ldp", "privacy.targets=[user_embedding]", "method=fedavg"], "privacy.targets", "method=fedavg"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_combinations_are_refused_in_one_named_line_before_any_data_is_read(overrides, group, why, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))  # reading any file would fail
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + overrides))
    message = str(refused.value)
    assert refused.value.field == group and why in message and "\n" not in message


@pytest.mark.parametrize("overrides", [
    [*MEDIAN, "sim.fast_path=off"],  # FedAvg takes any rule
    [ATTACK],  # and malicious clients
    ["defense=sum", "method=fedmf", *RATED],  # an exact-sum method with either unit-weight linear rule
    ["privacy=ldp", "privacy.targets=[item_rows]", "method=fedavg"],
])
def test_good_combinations_are_accepted(overrides):
    plan(compose_cfg(SMALL + overrides))


def test_a_robust_rule_turns_the_fast_path_off_and_aggregates():
    method, _ = make_method(MEDIAN)
    rounds = round_of(method)
    assert not rounds.uses_fast_path
    before = method.public.item.clone()
    rounds.train_round(0)
    assert not torch.equal(before, method.public.item)


def test_attacker_crafts_from_the_public_view_and_joins_before_the_defense():
    method, env = make_method([ATTACK, "sim.fast_path=off"])
    rounds = round_of(method)
    assert not rounds.uses_fast_path  # malicious uploads are not the gradient of the benign loss
    assert list(inspect.signature(Attack.craft).parameters) == ["self", "view", "ctx"]
    seen, views = {}, []
    craft, aggregate = rounds.attack.craft, rounds.defense.aggregate

    def watched_craft(view, ctx):  # the attacker cannot reach client data: it is poisoned while it works
        views.append(view)
        saved = (env.train, method.client.private)
        env.train, method.client.private = Poison("ClientStore"), Poison("PrivateParams")
        try:
            return craft(view, ctx)
        finally:
            env.train, method.client.private = saved

    def watched_aggregate(uploads, ctx=None):
        seen["uploads"], seen["ctx"] = uploads, ctx
        return aggregate(uploads, ctx)

    rounds.attack.craft, rounds.defense.aggregate = watched_craft, watched_aggregate
    rounds.train_round(0)
    assert views == [method.public]  # what every client downloads, nothing else
    uploads, ctx = seen["uploads"], seen["ctx"]
    assert uploads.n_clients == ctx.n_clients + 2  # the benign clients, then the two malicious ones
    malicious = uploads.row_client >= ctx.n_clients
    assert uploads.row_item[malicious].tolist() == [3, 3]


def test_the_attack_moves_the_target_through_the_defense():
    """The round merges the crafted uploads with the benign ones: the target's row ends elsewhere than
    in the same round without the attack, and rows no malicious client touched are unchanged."""
    honest, _ = make_method(["sim.fast_path=off"])
    attacked, _ = make_method([ATTACK, "sim.fast_path=off"])
    round_of(honest).train_round(0)
    round_of(attacked).train_round(0)
    moved = (honest.public.item - attacked.public.item).abs().sum(1) > 1e-6  # CUDA's index_add_ order: float noise
    assert moved.nonzero().squeeze(1).tolist() == [3]
